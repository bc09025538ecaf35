package hostnat

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

func baseConfig() Config {
	return Config{Randomize: RandomPRNG, NodePort: true, Mark: DefaultMark, VethPrefix: "eni", PrimaryLink: "eth0",
		PrimaryIP: netip.MustParseAddr("10.0.1.10"), VPCCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}}
}

// dump is every rule of the tables hostnat uses, as iptables -S lines.
func dump(t *testing.T, tb Tables) []string {
	t.Helper()
	var out []string
	for _, table := range []string{NAT, Mangle} {
		chains, err := tb.ListChains(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chains {
			lines, err := tb.List(table, c)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lines {
				out = append(out, table+" "+l)
			}
		}
	}
	return out
}

func mustReconcile(t *testing.T, tb Tables, c Config) []Change {
	t.Helper()
	changes, err := Reconcile(tb, PlanFor(c))
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

// TestPlanIsTheReferences: the default settings give the reference's
// rules, in the form iptables -S prints them (checked against the real
// iptables by the integration suite).
func TestPlanIsTheReferences(t *testing.T) {
	tb := NewMemTables()
	mustReconcile(t, tb, baseConfig())
	want := []string{
		`nat -A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -m state --state NEW -j AWS-CONNMARK-CHAIN-0`,
		`nat -A PREROUTING -m comment --comment "AWS, CONNMARK" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80`,
		`nat -A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0`,
		`nat -A AWS-CONNMARK-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN`,
		`nat -A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS, CONNMARK" -j CONNMARK --set-xmark 0x80/0x80`,
		`nat -A AWS-SNAT-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN`,
		`nat -A AWS-SNAT-CHAIN-0 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.1.10 --random-fully`,
		`mangle -A PREROUTING -i eth0 -m comment --comment "AWS, primary ENI" -m addrtype --dst-type LOCAL --limit-iface-in -j CONNMARK --set-xmark 0x80/0x80`,
		`mangle -A PREROUTING -i eni+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80`,
		`mangle -A PREROUTING -i vlan+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80`,
	}
	var got []string
	for _, l := range dump(t, tb) {
		if strings.Contains(l, " -A ") {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReconcileIsIdempotent: a second pass changes nothing.
func TestReconcileIsIdempotent(t *testing.T) {
	tb := NewMemTables()
	if c := mustReconcile(t, tb, baseConfig()); len(c) == 0 {
		t.Fatal("the first pass made nothing")
	}
	before := dump(t, tb)
	if c := mustReconcile(t, tb, baseConfig()); len(c) != 0 {
		t.Errorf("second pass changed %v", c)
	}
	if after := dump(t, tb); !slices.Equal(before, after) {
		t.Errorf("second pass changed the tables:\n%v\n%v", before, after)
	}
}

// TestReconcileRemovesWhatIsNoLongerWanted: a CIDR dropped, a duplicated
// jump, a chain of an older layout, SNAT turned external, node ports
// off: every aws-node rule not wanted goes, every other rule stays.
func TestReconcileRemovesWhatIsNoLongerWanted(t *testing.T) {
	tb := NewMemTables()
	foreign := [][]string{
		{NAT, PostRouting, "-s", "10.244.0.0/16", "-j", "MASQUERADE"},
		{Mangle, PreRouting, "-m", "comment", "--comment", "kube-proxy", "-j", "MARK", "--set-xmark", "0x4000/0x4000"},
	}
	for _, f := range foreign {
		if err := tb.Append(f[0], f[1], f[2:]...); err != nil {
			t.Fatal(err)
		}
	}
	c := baseConfig()
	c.ExcludeCIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}
	mustReconcile(t, tb, c)
	// Left by an older run: a second jump and the reference's old chain.
	must(t, tb.Append(NAT, PostRouting, "-m", "comment", "--comment", commentSNAT, "-j", SNATChain))
	must(t, tb.NewChain(NAT, "AWS-SNAT-CHAIN-1"))
	must(t, tb.Append(NAT, "AWS-SNAT-CHAIN-1", "-j", "RETURN"))

	c.ExcludeCIDRs = nil
	changes := mustReconcile(t, tb, c)
	if len(changes) != 4 {
		t.Errorf("changes %v, want the two chains rewritten and the duplicate jump and the old chain gone", changes)
	}
	for _, l := range dump(t, tb) {
		if strings.Contains(l, "192.168.0.0/16") || strings.Contains(l, "AWS-SNAT-CHAIN-1") {
			t.Errorf("left: %s", l)
		}
	}
	if n := countRules(t, tb, NAT, PostRouting, SNATChain); n != 1 {
		t.Errorf("%d jumps to %s, want 1", n, SNATChain)
	}

	c.ExternalSNAT, c.NodePort = true, false
	mustReconcile(t, tb, c)
	cur, err := Current(tb)
	must(t, err)
	if len(cur) != 0 {
		t.Errorf("with external SNAT and no node ports, left: %v", cur)
	}
	for _, f := range foreign {
		if n := countRules(t, tb, f[0], f[1], f[len(f)-1]); n != 1 {
			t.Errorf("another agent's rule %v: %d left, want 1", f, n)
		}
	}
}

// TestExternalSNATKeepsNodePorts: external SNAT with node ports keeps the
// mangle rules and the restore for pods, not the nat chains.
func TestExternalSNATKeepsNodePorts(t *testing.T) {
	c := baseConfig()
	c.ExternalSNAT = true
	p := PlanFor(c)
	if len(p.Chains) != 0 || len(p.Builtins) != 3 || !p.MarkRule {
		t.Errorf("plan %+v: want no chain, the three mangle rules and rule 1024", p)
	}
	for _, r := range p.Builtins {
		if r.Table != Mangle {
			t.Errorf("%s with external SNAT", r)
		}
	}
}

// TestRandomize: the SNAT rule's port option by setting and iptables.
func TestRandomize(t *testing.T) {
	for _, tc := range []struct {
		randomize string
		noFully   bool
		want      string
	}{
		{RandomPRNG, false, "--random-fully"}, {RandomPRNG, true, "--random"}, {RandomHash, false, "--random"}, {RandomNone, false, "LOCAL -j SNAT --to-source 10.0.1.10"},
	} {
		c := baseConfig()
		c.Randomize, c.NoRandomFully = tc.randomize, tc.noFully
		rules := PlanFor(c).Chains[[2]string{NAT, SNATChain}]
		last := quoteSpec(rules[len(rules)-1].Spec)
		if !strings.HasSuffix(last, tc.want) {
			t.Errorf("%s (no --random-fully: %v): %s, want it to end in %s", tc.randomize, tc.noFully, last, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"randomize": func(c *Config) { c.Randomize = "fully" },
		"mark":      func(c *Config) { c.Mark = 0 },
		"primary":   func(c *Config) { c.PrimaryIP = netip.Addr{} },
		"cidr":      func(c *Config) { c.ExcludeCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00::/8")} },
		"link":      func(c *Config) { c.PrimaryLink = "" },
	} {
		c := baseConfig()
		mutate(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	if err := baseConfig().Check(); err != nil {
		t.Error(err)
	}
}

// TestMarkRule: rule 1024 once, moved with the mark, gone when unwanted;
// a rule 1024 of another kind is left alone.
func TestMarkRule(t *testing.T) {
	k := model.New()
	must(t, k.AddNamespace("node"))
	h, err := k.Open("node")
	must(t, err)
	other := kernel.Rule{Priority: MarkRulePriority, Family: kernel.FamilyV4, IifName: "eth9", Table: 7}
	must(t, h.RuleAdd(other))
	count := func(mark uint32) int {
		rules, err := h.RuleList(kernel.FamilyV4)
		must(t, err)
		n := 0
		for _, r := range rules {
			if IsMarkRule(r) && r.Mark == mark {
				n++
			}
		}
		return n
	}
	for i := 0; i < 2; i++ {
		if _, err := ReconcileMarkRule(h, 0x80, true); err != nil {
			t.Fatal(err)
		}
	}
	if count(0x80) != 1 {
		t.Errorf("%d rules for 0x80, want 1", count(0x80))
	}
	_, err = ReconcileMarkRule(h, 0x100, true)
	must(t, err)
	if count(0x80) != 0 || count(0x100) != 1 {
		t.Errorf("after the mark changed: %d for 0x80, %d for 0x100", count(0x80), count(0x100))
	}
	_, err = ReconcileMarkRule(h, 0x100, false)
	must(t, err)
	if count(0x100) != 0 {
		t.Error("rule 1024 left when not wanted")
	}
	rules, err := h.RuleList(kernel.FamilyV4)
	must(t, err)
	if !slices.ContainsFunc(rules, func(r kernel.Rule) bool { return r.Priority == MarkRulePriority && r.IifName == "eth9" }) {
		t.Error("another agent's rule at 1024 was deleted")
	}
}

func TestSplitSpec(t *testing.T) {
	got, err := splitSpec(`-A X -m comment --comment "AWS, SNAT \"x\"" -j RETURN`)
	must(t, err)
	want := []string{"-A", "X", "-m", "comment", "--comment", `AWS, SNAT "x"`, "-j", "RETURN"}
	if !slices.Equal(got, want) {
		t.Errorf("%q", got)
	}
	if _, err := splitSpec(`-A X --comment "open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

func countRules(t *testing.T, tb Tables, table, chain, target string) int {
	t.Helper()
	rules, err := listRules(tb, table, chain)
	must(t, err)
	n := 0
	for _, r := range rules {
		if r.Spec[len(r.Spec)-1] == target || slices.Contains(r.Spec, target) {
			n++
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
