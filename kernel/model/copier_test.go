package model

import (
	"fmt"
	"net"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// What RuleList and RouteList hand out is the caller's: writing into an
// address, or appending to one, changes neither the model nor the next
// entry of the list (the copies share their backing chunks).
func TestListedRulesAndRoutesAreTheCallers(t *testing.T) {
	w := newWorld(t)
	l, err := w.node.LinkByName("eth0")
	must(t, err)
	for i := 1; i <= 3; i++ {
		a := cidr(fmt.Sprintf("10.0.9.%d/32", i))
		must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: a, Table: kernel.TableMain}))
		must(t, w.node.RouteAdd(kernel.Route{Dst: a, LinkIndex: l.Index, Scope: kernel.ScopeLink}))
	}
	// The caller writes into its first copy and appends to it.
	scribble := func(n *net.IPNet) {
		n.IP[len(n.IP)-1] = 99
		n.Mask[0] = 0
		_ = append(n.IP, make([]byte, 32)...) // within cap, this would overwrite the next copies
		_ = append(n.Mask, make([]byte, 32)...)
	}
	rules, err := w.node.RuleList(kernel.FamilyV4)
	must(t, err)
	var at512 []kernel.Rule
	for _, r := range rules {
		if r.Priority == 512 {
			at512 = append(at512, r)
		}
	}
	routes, err := w.node.RouteList(kernel.FamilyV4, kernel.TableMain)
	must(t, err)
	var ours []kernel.Route
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.To4()[2] == 9 {
			ours = append(ours, r)
		}
	}
	if len(at512) != 3 || len(ours) != 3 {
		t.Fatalf("listed %d rules and %d routes of the 3 added", len(at512), len(ours))
	}
	scribble(at512[0].Dst)
	scribble(ours[0].Dst)
	for i := 1; i <= 2; i++ {
		want := fmt.Sprintf("10.0.9.%d/32", i+1)
		if got := at512[i].Dst.String(); got != want {
			t.Errorf("rule copy %d after the caller wrote into the first: %s, want %s", i, got, want)
		}
		if got := ours[i].Dst.String(); got != want {
			t.Errorf("route copy %d after the caller wrote into the first: %s, want %s", i, got, want)
		}
	}
	for i := 1; i <= 3; i++ {
		want := fmt.Sprintf("10.0.9.%d/32", i)
		if got := rulesAt(t, w.node, 512); len(got) != 3 || got[i-1].Dst.String() != want {
			t.Errorf("rule %d after the caller wrote into its copies: %v", i, got)
		}
	}
	again, err := w.node.RouteList(kernel.FamilyV4, kernel.TableMain)
	must(t, err)
	found := 0
	for _, r := range again {
		if r.Dst != nil && r.Dst.IP.To4()[2] == 9 {
			if r.Dst.String() != fmt.Sprintf("10.0.9.%d/32", found+1) {
				t.Errorf("route after the caller wrote into its copies: %v", r.Dst)
			}
			found++
		}
	}
	if found != 3 {
		t.Errorf("found %d of the 3 routes", found)
	}
}

// BenchmarkRuleList: a node of 110 pods' rules, listed as ipamd's
// reconciler and the plugin's stale-rule sweep list them.
func BenchmarkRuleList(b *testing.B) {
	k := New()
	if err := k.AddNamespace("node"); err != nil {
		b.Fatal(err)
	}
	node, _ := k.Open("node")
	for i := range 110 {
		a := cidr(fmt.Sprintf("10.0.%d.%d/32", 1+i/250, 1+i%250))
		node.RuleAdd(kernel.Rule{Priority: 512, Dst: a, Table: kernel.TableMain})
		node.RuleAdd(kernel.Rule{Priority: 1536, Src: a, Table: 2})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := node.RuleList(kernel.FamilyV4); err != nil {
			b.Fatal(err)
		}
	}
}
