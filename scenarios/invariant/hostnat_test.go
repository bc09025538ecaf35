package invariant

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/hostnat"
)

// withNAT gives the fixture's node the host NAT rules of the reference's
// defaults, as ipamd leaves them.
func withNAT(t *testing.T, f *fixture) *hostnat.MemTables {
	t.Helper()
	c := hostnat.Config{Randomize: hostnat.RandomPRNG, NodePort: true, Mark: hostnat.DefaultMark, VethPrefix: "eni",
		PrimaryLink: "eth0", PrimaryIP: netip.MustParseAddr("10.0.1.10"), VPCCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}}
	tb := hostnat.NewMemTables()
	p := hostnat.PlanFor(c)
	if _, err := hostnat.Reconcile(tb, p); err != nil {
		t.Fatal(err)
	}
	if _, err := hostnat.ReconcileMarkRule(f.node, c.Mark, true); err != nil {
		t.Fatal(err)
	}
	f.w.NAT, f.w.NATPlan, f.w.NATMark = tb, p, c.Mark
	return tb
}

// TestHostNATCheck: the node's aws-node iptables rules and rule 1024 as
// planned are clean; a copy, a stale rule, an unwanted chain or rule
// 1024 of another mark is a LEAK; a missing rule is BROKEN. Another
// agent's rule is not a finding.
func TestHostNATCheck(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, f *fixture, tb *hostnat.MemTables)
		kind    string
		what    string
	}{
		{"clean", func(*testing.T, *fixture, *hostnat.MemTables) {}, "", ""},
		{"another agent's rule", func(t *testing.T, f *fixture, tb *hostnat.MemTables) {
			must(t, tb.Append(hostnat.NAT, hostnat.PostRouting, "-m", "comment", "--comment", "kube-proxy", "-j", "MASQUERADE"))
		}, "", ""},
		{"a second jump", func(t *testing.T, f *fixture, tb *hostnat.MemTables) {
			must(t, tb.Append(hostnat.NAT, hostnat.PostRouting, "-m", "comment", "--comment", "AWS SNAT CHAIN", "-j", hostnat.SNATChain))
		}, Leak, "iptables rule -t nat -A POSTROUTING"},
		{"a stale CIDR", func(t *testing.T, f *fixture, tb *hostnat.MemTables) {
			must(t, tb.Append(hostnat.NAT, hostnat.SNATChain, "-d", "172.16.0.0/12", "-m", "comment", "--comment", "AWS SNAT CHAIN", "-j", "RETURN"))
		}, Leak, "172.16.0.0/12"},
		{"an old chain", func(t *testing.T, f *fixture, tb *hostnat.MemTables) {
			must(t, tb.NewChain(hostnat.NAT, "AWS-SNAT-CHAIN-1"))
		}, Leak, "chain nat/AWS-SNAT-CHAIN-1"},
		{"the jump is gone", func(t *testing.T, f *fixture, tb *hostnat.MemTables) {
			must(t, tb.Delete(hostnat.NAT, hostnat.PostRouting, "-m", "comment", "--comment", "AWS SNAT CHAIN", "-j", hostnat.SNATChain))
		}, Broken, "iptables rule missing: -t nat -A POSTROUTING"},
		{"rule 1024 is gone", func(t *testing.T, f *fixture, _ *hostnat.MemTables) {
			must(t, f.node.RuleDel(hostnat.MarkRule(hostnat.DefaultMark)))
		}, Broken, "fwmark 0x80/0x80 lookup main"},
		{"rule 1024 of an old mark", func(t *testing.T, f *fixture, _ *hostnat.MemTables) {
			must(t, f.node.RuleAdd(hostnat.MarkRule(0x100)))
		}, Leak, "0x100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			tb := withNAT(t, f)
			c.breakIt(t, f, tb)
			got, vs := kinds(t, f.w)
			if c.kind == "" {
				if len(vs) != 0 {
					t.Fatalf("violations: %v", vs)
				}
				return
			}
			if !strings.Contains(got[c.kind], c.what) || len(vs) != 1 {
				t.Fatalf("want one %s containing %q, got %v", c.kind, c.what, vs)
			}
		})
	}
}

// TestHostNATForeign: another agent's rule deleted is FOREIGN; present,
// it is no finding.
func TestHostNATForeign(t *testing.T) {
	f := setup(t)
	tb := withNAT(t, f)
	foreign := hostnat.Rule{Table: hostnat.NAT, Chain: hostnat.PostRouting, Spec: []string{"-m", "comment", "--comment", "kube-proxy", "-j", "MASQUERADE"}}
	must(t, tb.Append(foreign.Table, foreign.Chain, foreign.Spec...))
	f.w.NATForeign = []hostnat.Rule{foreign}
	if _, vs := kinds(t, f.w); len(vs) != 0 {
		t.Fatalf("violations with the foreign rule in place: %v", vs)
	}
	must(t, tb.Delete(foreign.Table, foreign.Chain, foreign.Spec...))
	got, vs := kinds(t, f.w)
	if !strings.Contains(got[Foreign], "kube-proxy") || len(vs) != 1 {
		t.Fatalf("want one FOREIGN naming kube-proxy's rule, got %v", vs)
	}
}
