package model

import (
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// Every kind of change moves the generation; reads and lookups do not
// (a watcher skipping a machine whose generation stands still must not
// miss a change).
func TestGenerationCountsChanges(t *testing.T) {
	w := newWorld(t)
	changes := []struct {
		name string
		do   func() error
	}{
		{"rule add", func() error {
			return w.node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.1.20/32"), Table: kernel.TableMain})
		}},
		{"rule del", func() error {
			return w.node.RuleDel(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.1.20/32"), Table: kernel.TableMain})
		}},
		{"route add", func() error {
			return w.node.RouteAdd(kernel.Route{Family: kernel.FamilyV4, Dst: cidr("10.0.9.0/24"), LinkIndex: w.eth0, Table: 7, Scope: kernel.ScopeLink})
		}},
		{"sysctl", func() error { return w.node.SysctlSet("net/ipv4/ip_forward", "1") }},
		{"link up", func() error { return w.node.LinkSetUp("enia") }},
		{"namespace", func() error { return w.k.AddNamespace("other") }},
		{"link del", func() error { return w.node.LinkDel("enia") }},
	}
	for _, c := range changes {
		before := w.k.Generation()
		must(t, c.do())
		if w.k.Generation() == before {
			t.Errorf("%s: generation stayed at %d", c.name, before)
		}
	}
	before := w.k.Generation()
	if _, err := w.node.RuleList(kernel.FamilyAll); err != nil {
		t.Fatal(err)
	}
	if _, err := w.node.RouteList(kernel.FamilyAll, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.20")}); err != nil {
		t.Fatal(err)
	}
	if got := w.k.Generation(); got != before {
		t.Fatalf("reads moved the generation from %d to %d", before, got)
	}
	if c := w.k.Clone(); c.Generation() != before {
		t.Fatalf("a clone starts at generation %d, not the original's %d", c.Generation(), before)
	}
}
