package model

import (
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

func TestRuleAddDel(t *testing.T) {
	w := newWorld(t)
	r := kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}
	must(t, w.node.RuleAdd(r))
	wantErrno(t, w.node.RuleAdd(r), syscall.EEXIST)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 3})) // another table: another rule
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Src: cidr("10.0.0.1/32"), Dst: cidr("2001:db8::1/128"), Table: 2}), syscall.EINVAL)
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Priority: 9, IifName: "sixteen-chars-xx", Table: 2}), syscall.ERANGE)

	// Wildcards: priority + source deletes the first match, table 2.
	must(t, w.node.RuleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32")}))
	if left := rulesAt(t, w.node, 1536); len(left) != 1 || left[0].Table != 3 {
		t.Fatalf("left %+v, want table 3", left)
	}
	wantErrno(t, w.node.RuleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}), syscall.ENOENT)
	wantErrno(t, w.node.RuleDel(kernel.Rule{Priority: 512, Dst: cidr("10.9.9.9/32")}), syscall.ENOENT)
	// Family: from the selectors, else Family, else IPv4 (as netlink sends it).
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 200, Table: 7}))
	if got := rulesAt(t, w.node, 200); len(got) != 1 || got[0].Family != kernel.FamilyV4 {
		t.Fatalf("rule without family: %+v", got)
	}
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 200, Family: kernel.FamilyV6, Table: 7}))
	must(t, w.node.RuleDel(kernel.Rule{Priority: 200, Family: kernel.FamilyV6}))
	if got := rulesAt(t, w.node, 200); len(got) != 1 || got[0].Family != kernel.FamilyV4 {
		t.Fatalf("IPv6 delete took: %+v", got)
	}
	// iif only.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 10, IifName: "nope0", Table: 7}))
	must(t, w.node.RuleDel(kernel.Rule{IifName: "nope0"}))
	if len(rulesAt(t, w.node, 10)) != 0 {
		t.Fatal("iif rule not deleted")
	}
	// All wildcards: the first IPv4 rule, "0: lookup local", as Linux does.
	must(t, w.node.RuleDel(kernel.Rule{}))
	if got := rulesAt(t, w.node, 0); len(got) != 1 || got[0].Family != kernel.FamilyV6 {
		t.Fatalf("after deleting with no selector: %+v", got)
	}
}

// TestRuleDefaults: priority 0 and table 0 on add, as measured on Linux.
func TestRuleDefaults(t *testing.T) {
	w := newWorld(t)
	// One below the second rule of the family: 32765 with the default rules.
	must(t, w.node.RuleAdd(kernel.Rule{Family: kernel.FamilyV6, Dst: cidr("2001:db8::1/128"), Table: 5}))
	if got := rulesAt(t, w.node, 32765); len(got) != 1 || got[0].Family != kernel.FamilyV6 {
		t.Fatalf("IPv6 default priority: %+v", got)
	}
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 100, Dst: cidr("10.1.1.1/32"), Table: 5}))
	must(t, w.node.RuleAdd(kernel.Rule{Dst: cidr("10.1.1.2/32"), Table: 9}))
	if got := rulesAt(t, w.node, 99); len(got) != 1 {
		t.Fatal("IPv4 default priority is not 99 (one below the second rule, 100)")
	}
	// Table 0: a fresh table for IPv4, EINVAL for IPv6.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 101, Dst: cidr("10.1.1.3/32")}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 102, Dst: cidr("10.1.1.4/32")}))
	if a, b := rulesAt(t, w.node, 101), rulesAt(t, w.node, 102); a[0].Table != 1 || b[0].Table != 2 {
		t.Fatalf("fresh tables %d, %d; want 1, 2", a[0].Table, b[0].Table)
	}
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Priority: 103, Dst: cidr("2001:db8::3/128")}), syscall.EINVAL)
	// Host bits are kept, as the kernel keeps them.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 104, Src: cidr("10.1.2.3/16"), Table: 5}))
	if got := rulesAt(t, w.node, 104); got[0].Src.String() != "10.1.2.3/16" {
		t.Fatalf("rule source %s", got[0].Src)
	}
	// Mark without mask gets the full mask.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 105, Mark: 0x80, Table: 5}))
	if got := rulesAt(t, w.node, 105); got[0].Mask != 0xffffffff {
		t.Fatalf("mask %#x", got[0].Mask)
	}
	// Order within a priority is the order of addition.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.12/32"), Table: kernel.TableMain}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.11/32"), Table: kernel.TableMain}))
	if got := rulesAt(t, w.node, 512); got[0].Dst.String() != "10.0.1.12/32" {
		t.Fatalf("order %+v", got)
	}
}
