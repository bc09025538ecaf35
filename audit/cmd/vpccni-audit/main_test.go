package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
)

// node is a model node namespace "node" with its ENIs, one healthy pod
// (web-0, 10.0.1.11) and another agent's rule at 512, and a checkpoint
// file holding web-0's address.
type node struct {
	t    *testing.T
	k    *model.Kernel
	h    kernel.API
	ckpt string
}

func newNode(t *testing.T) *node {
	k := model.New()
	must(t, k.AddNamespace("node"))
	h, err := k.Open("node")
	must(t, err)
	must(t, h.SysctlSet("net/ipv4/conf/all/forwarding", "1"))
	must(t, h.SysctlSet("net/ipv4/conf/default/forwarding", "1"))
	must(t, testns.PlugENIs(h))
	n := &node{t: t, k: k, h: h, ckpt: filepath.Join(t.TempDir(), "ipam.json")}
	veth := ownership.HostVeth("eni", "default", "web-0")
	must(t, h.AddVeth(kernel.VethSpec{Name: veth, PeerName: "pweb-0"}))
	l, err := h.LinkByName(veth)
	must(t, err)
	must(t, h.LinkSetUp(veth))
	ip := netip.MustParseAddr("10.0.1.11")
	must(t, h.RouteAdd(kernel.Route{Dst: ownership.IPNet(ownership.HostPrefix(ip)), LinkIndex: l.Index, Scope: kernel.ScopeLink}))
	must(t, h.RuleAdd(ownership.ToPodRule(ip)))
	must(t, h.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: testns.IfAddr("192.168.7.7/32"), Table: kernel.TableMain}))
	n.writeCheckpoint(alloc("web-0", "10.0.1.11"))
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func alloc(pod, addr string) checkpoint.Allocation {
	return checkpoint.Allocation{NetworkName: "aws-cni", ContainerID: "c-" + pod, IfName: "eth0", IPv4: addr,
		Metadata: checkpoint.Metadata{K8SPodNamespace: "default", K8SPodName: pod}}
}

func (n *node) writeCheckpoint(allocs ...checkpoint.Allocation) {
	b, err := json.Marshal(checkpoint.File{Version: checkpoint.Version, Allocations: allocs})
	must(n.t, err)
	must(n.t, os.WriteFile(n.ckpt, b, 0o600))
}

// leak leaves rule 512 of an address nobody holds (#2048).
func (n *node) leak() {
	must(n.t, n.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
}

// run runs the command on the node without the runtime and ipamd, and
// returns its exit code, stdout and stderr.
func (n *node) run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	args = append([]string{"--netns", "node", "--checkpoint", n.ckpt, "--cri-endpoint", "", "--introspection", ""}, args...)
	code := run(args, &out, &errb, func(string) string { return "" }, deps{opener: n.k, sleep: func(time.Duration) {}})
	return code, out.String(), errb.String()
}

func TestCleanNodeExitsZero(t *testing.T) {
	n := newNode(t)
	code, out, errs := n.run()
	if code != exitClean || !strings.Contains(out, "clean: no finding.") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}

func TestLeakExitsOneWithEvidence(t *testing.T) {
	n := newNode(t)
	n.leak()
	code, out, _ := n.run()
	for _, want := range []string{"LEAKED", "rule 512: from all to 10.0.1.99 lookup main", "ip rule show priority 512", "1 finding: 1 LEAKED.", "--fix may remove"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != exitFindings {
		t.Fatalf("exit %d, want %d\n%s", code, exitFindings, out)
	}
}

func TestJSON(t *testing.T) {
	n := newNode(t)
	n.leak()
	code, out, _ := n.run("--json")
	var rep struct {
		Sources  []sourceNote
		Findings []audit.Finding
		Counts   map[string]int
	}
	must(t, json.Unmarshal([]byte(out), &rep))
	if code != exitFindings || len(rep.Findings) != 1 || rep.Counts["LEAKED"] != 1 || !rep.Findings[0].Fixable || len(rep.Sources) != 4 || !rep.Sources[1].Read {
		t.Fatalf("exit %d, report %+v", code, rep)
	}
}

// TestFixIsADryRunByDefault: --fix alone prints the plan and removes
// nothing; --dry-run=false removes the leak and nothing else.
func TestFixIsADryRunByDefault(t *testing.T) {
	n := newNode(t)
	n.leak()
	before, err := n.h.RuleList(kernel.FamilyAll)
	must(t, err)
	code, out, _ := n.run("--fix")
	after, err := n.h.RuleList(kernel.FamilyAll)
	must(t, err)
	if code != exitFindings || len(after) != len(before) || !strings.Contains(out, "would remove 1") {
		t.Fatalf("dry run: exit %d, rules %d → %d\n%s", code, len(before), len(after), out)
	}
	code, out, _ = n.run("--fix", "--dry-run=false")
	after, err = n.h.RuleList(kernel.FamilyAll)
	must(t, err)
	if code != exitClean || len(after) != len(before)-1 || !strings.Contains(out, "removed  rule 512: from all to 10.0.1.99 lookup main") {
		t.Fatalf("fix: exit %d, rules %d → %d\n%s", code, len(before), len(after), out)
	}
}

// TestDoubleInTheCheckpoint: an address the checkpoint gives two
// sandboxes is a DOUBLE finding, though ipamd would refuse the file.
func TestDoubleInTheCheckpoint(t *testing.T) {
	n := newNode(t)
	n.writeCheckpoint(alloc("web-0", "10.0.1.11"), alloc("web-1", "10.0.1.11"))
	code, out, _ := n.run()
	if code != exitFindings || !strings.Contains(out, "DOUBLE") || !strings.Contains(out, "ipamd would refuse it") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// TestUnansweredSourcesAreNoted: a runtime and an ipamd that do not answer
// leave the audit to the node and the checkpoint, and the head says so.
func TestUnansweredSourcesAreNoted(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	code, out, errs := n.run("--cri-endpoint", "unix://"+filepath.Join(dir, "none.sock"), "--introspection", "unix:"+filepath.Join(dir, "none.sock"), "--timeout", "200ms")
	if code != exitClean || strings.Count(out, "no answer") != 2 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}

func TestCannotRead(t *testing.T) {
	n := newNode(t)
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	must(t, os.WriteFile(garbage, []byte("{not json"), 0o600))
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no checkpoint":   {[]string{"--checkpoint", filepath.Join(t.TempDir(), "none.json")}, "no checkpoint at"},
		"corrupt":         {[]string{"--checkpoint", garbage}, "corrupt at byte"},
		"no namespace":    {[]string{"--netns", "elsewhere"}, "open the node's network namespace"},
		"bad prefix":      {[]string{"--veth-prefix", "e/x"}, "--veth-prefix"},
		"dry run alone":   {[]string{"--dry-run=false"}, "without --fix"},
		"unknown flag":    {[]string{"--frobnicate"}, "unknown flag"},
		"an argument":     {[]string{"node-1"}, "unknown command"},
		"negative settle": {[]string{"--fix", "--settle", "-1s"}, "--settle"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errs := n.run(c.args...)
			if code != exitCannot || !strings.Contains(errs, c.want) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errs, c.want)
			}
		})
	}
}

func TestHelpExplains(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"--help"}, &out, &out, func(string) string { return "" }, deps{})
	for _, want := range []string{"LEAKED", "MISSING", "STRAY ALLOCATION", "DOUBLE", "MISROUTE", "Exit status", "--dry-run", "--cri-endpoint"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if code != exitClean {
		t.Fatalf("--help exit %d", code)
	}
}
