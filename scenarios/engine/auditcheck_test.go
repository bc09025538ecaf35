package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// runCell runs a library scenario in one mode under one policy, the audit's
// input changed by hook when it is set.
func runCell(t *testing.T, file, mode, pol string, hook func(*audit.Input)) *Result {
	t.Helper()
	s, err := spec.Load("../library/" + file + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.ByName(pol)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s, mode, p, Options{auditInput: hook})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func disagreements(res *Result) []string {
	var out []string
	for _, v := range res.Violations {
		if v.Kind == invariant.AuditDisagrees {
			out = append(out, v.What)
		}
	}
	return out
}

// TestAuditFindsTheLegacyLeak: #2048 under the reference's v1.11 flow. The
// invariants find web-1's rules 512 and 1536 leaked; the audit, from the
// node, the checkpoint, the runtime and ipamd's memory alone, reports each
// of them LEAKED for --fix to remove, and the misroute to the other node
// that now holds the address. The two agree, and the cell matches.
func TestAuditFindsTheLegacyLeak(t *testing.T) {
	res := runCell(t, "autoscaler-evicts-aws-node", "ipv4", "ref-v1.11", nil)
	if d := disagreements(res); len(d) > 0 || !res.Match {
		t.Fatalf("match %v, disagreements %v", res.Match, d)
	}
	leaks := 0
	for _, v := range res.Violations {
		a, prio, ok := leakedPodRule(v, invariant.World{})
		if !ok {
			continue
		}
		leaks++
		if !slices.ContainsFunc(res.Audit, func(f audit.Finding) bool {
			return f.Class == audit.Leaked && f.Fixable && f.Addr == a.String() && strings.HasPrefix(f.Object, fmt.Sprintf("rule %d:", prio))
		}) {
			t.Errorf("the invariants find %q; the audit has no fixable LEAKED rule %d of %s: %v", v.What, prio, a, res.Audit)
		}
	}
	if leaks != 2 {
		t.Errorf("the invariants find %d leaked rules of a deleted pod, want 2 (512 and 1536): %v", leaks, res.Violations)
	}
	if !slices.ContainsFunc(res.Audit, func(f audit.Finding) bool { return f.Class == audit.Misroute }) {
		t.Errorf("the audit does not find the misroute to the other node: %v", res.Audit)
	}
}

// hiddenRule is the node with one address's rule 512 left out of the
// listing (the kernel still routes by it).
type hiddenRule struct {
	kernel.API
	to netip.Addr
}

func (h hiddenRule) RuleList(f kernel.Family) ([]kernel.Rule, error) {
	rs, err := h.API.RuleList(f)
	return slices.DeleteFunc(rs, func(r kernel.Rule) bool { return ownership.IsToPod(r, h.to) }), err
}

// TestAuditMissingALeakDisagrees: the same cell, the leaked rule 512 hidden
// from the audit: the invariants' leak the audit does not report is a
// disagreement, and the cell no longer matches its expectation.
func TestAuditMissingALeakDisagrees(t *testing.T) {
	res := runCell(t, "autoscaler-evicts-aws-node", "ipv4", "ref-v1.11", func(in *audit.Input) {
		in.Node = hiddenRule{in.Node, netip.MustParseAddr("10.0.2.11")}
	})
	d := disagreements(res)
	if len(d) != 1 || !strings.Contains(d[0], "rule 512 to 10.0.2.11/32") || !strings.Contains(d[0], "does not report that rule 512 of 10.0.2.11 LEAKED") {
		t.Fatalf("disagreements %q", d)
	}
	if res.Match || res.Main != invariant.Leak {
		t.Errorf("match %v, main %s: the leak stays the main kind, and the cell must not match", res.Match, res.Main)
	}
}

// TestAuditUnexplainedFindingDisagrees: a clean cell, the audit shown a
// checkpoint entry of a sandbox that never was: its STRAY ALLOCATION no
// violation explains is a disagreement, and a cell expected clean fails.
func TestAuditUnexplainedFindingDisagrees(t *testing.T) {
	res := runCell(t, "autoscaler-evicts-aws-node", "ipv4", "default", func(in *audit.Input) {
		in.Allocations = append(in.Allocations, checkpoint.Allocation{NetworkName: "aws-cni", ContainerID: "sandbox-ghost-1", IfName: "eth0",
			IPv4: "10.0.2.99", Metadata: checkpoint.Metadata{K8SPodNamespace: "default", K8SPodName: "ghost"}})
	})
	d := disagreements(res)
	if len(d) != 1 || !strings.Contains(d[0], "STRAY ALLOCATION") || !strings.Contains(d[0], "10.0.2.99") {
		t.Fatalf("disagreements %q", d)
	}
	if res.Expected != "clean" || res.Match || res.Verdict != "leak" || res.Main != invariant.AuditDisagrees {
		t.Errorf("expected %s, match %v, verdict %s, main %s", res.Expected, res.Match, res.Verdict, res.Main)
	}
}

// TestAgreeRules: the agreement's rules and exceptions on made-up findings.
func TestAgreeRules(t *testing.T) {
	ip := netip.MustParseAddr
	deleted := invariant.Pod{Name: "default/web-1", ContainerID: "sandbox-web-1-1", IP: ip("10.0.2.11"), HostVeth: "eni0000000000a"}
	live := invariant.Pod{Name: "default/web-2", ContainerID: "sandbox-web-2-1", IP: ip("10.0.3.11"), HostVeth: "eni0000000000b"}
	w := invariant.World{Live: []invariant.Pod{live}, Deleted: []invariant.Pod{deleted}, IpamdUp: true}
	leak512 := invariant.Violation{Kind: invariant.Leak, What: "rule 512 to 10.0.2.11/32 lookup main (default/web-1, deleted)"}
	leaked := audit.Finding{Class: audit.Leaked, Addr: "10.0.2.11", Object: "rule 512: from all to 10.0.2.11 lookup main"}
	stray := audit.Finding{Class: audit.Stray, Addr: "10.0.2.11", Object: "allocation sandbox-web- (default/web-1)"}
	for _, c := range []struct {
		name string
		fs   []audit.Finding
		j    judged
		want int // disagreements
	}{
		{"clean is clean", nil, judged{w: w}, 0},
		{"a finding on a clean cell", []audit.Finding{leaked}, judged{w: w}, 1},
		{"a leak found", []audit.Finding{leaked}, judged{vs: []invariant.Violation{leak512}, w: w}, 0},
		{"a leak missed", nil, judged{vs: []invariant.Violation{leak512}, w: w}, 1},
		{"the address's other rule found, not the leaked one", []audit.Finding{{Class: audit.Leaked, Addr: "10.0.2.11", Object: "rule 1536: from 10.0.2.11 lookup 2"}},
			judged{vs: []invariant.Violation{leak512}, w: w}, 1},
		{"a leak of another address does not explain", []audit.Finding{{Class: audit.Leaked, Addr: "10.0.2.12", Object: "rule 512: from all to 10.0.2.12 lookup main"}},
			judged{vs: []invariant.Violation{leak512}, w: w}, 2},
		{"a leak a live pod's address now: not owed",
			nil, judged{vs: []invariant.Violation{leak512}, w: invariant.World{Live: []invariant.Pod{{Name: "default/x", IP: ip("10.0.2.11")}}}}, 0},
		{"a leak whose address an allocation still holds: STRAY names it",
			[]audit.Finding{stray}, judged{vs: []invariant.Violation{leak512, {Kind: invariant.IPAM, What: "ipamd still holds 10.0.2.11 for gone sandbox sandbox-web-1-1"}}, w: w}, 0},
		{"the harm of a leak: traffic from a live pod to its address",
			[]audit.Finding{leaked, {Class: audit.Misroute, Addr: "10.0.3.11", Object: "traffic from 10.0.3.11 to 10.0.2.11"}},
			judged{vs: []invariant.Violation{leak512}, w: w}, 0},
		{"a misroute nothing explains", []audit.Finding{{Class: audit.Misroute, Addr: "10.0.3.11", Object: "traffic from 10.0.3.11 to 198.51.100.7"}},
			judged{vs: []invariant.Violation{leak512}, w: w}, 2},
		{"a checkpoint entry ipamd's memory dropped, its write cut by a failpoint", []audit.Finding{stray}, judged{w: w, checkpointCut: true}, 0},
		{"a checkpoint entry ipamd's memory dropped, no write cut", []audit.Finding{stray}, judged{w: w}, 1},
		{"a lost sandbox never collected (STUCK) explains its stray allocation", []audit.Finding{stray},
			judged{vs: []invariant.Violation{{Kind: invariant.Stuck, What: "sandbox sandbox-web-1-1 of default/web-1, lost by the runtime, was never collected by GC"}},
				w: invariant.World{Pending: []invariant.Pod{deleted}}}, 0},
		{"a VLAN link by name", []audit.Finding{{Class: audit.Leaked, Object: "VLAN link vlan.eth.1", Reason: "no rule uses its table 101"}},
			judged{vs: []invariant.Violation{{Kind: invariant.Leak, What: "link vlan.eth.1 (vlan)"}}, w: w}, 0},
		{"a VLAN link of another name", []audit.Finding{{Class: audit.Leaked, Object: "VLAN link vlan.eth.2", Reason: "no rule uses its table 102"}},
			judged{vs: []invariant.Violation{{Kind: invariant.Leak, What: "link vlan.eth.1 (vlan)"}}, w: w}, 1},
		{"a missing rule is BROKEN, not a leak", []audit.Finding{{Class: audit.Missing, Addr: "10.0.3.11", Object: "rule 512: from all to 10.0.3.11 lookup main"}},
			judged{vs: []invariant.Violation{{Kind: invariant.Leak, What: "rule 512 to 10.0.3.11/32 lookup main (no pod)"}}, w: w}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agree(c.fs, c.j); len(got) != c.want {
				t.Errorf("%d disagreements, want %d: %v", len(got), c.want, got)
			}
		})
	}
}
