package model

import (
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// lookupWorld: eth0 (main, default via 10.0.1.1), eth1 (table 2, default
// via 10.0.2.1), a pod 10.0.2.11 behind enia using table 2, forwarding on.
func lookupWorld(t *testing.T) *world {
	w := newWorld(t)
	must(t, w.node.SysctlSet("net/ipv4/ip_forward", "1"))
	i1, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, w.node.LinkSetUp("eth1"))
	must(t, w.node.AddrAdd(i1, cidr("10.0.2.10/24")))
	must(t, w.node.RouteAdd(kernel.Route{Table: 2, Dst: cidr("10.0.2.1/32"), LinkIndex: i1, Scope: kernel.ScopeLink}))
	must(t, w.node.RouteAdd(kernel.Route{Table: 2, Gw: ip("10.0.2.1"), LinkIndex: i1}))
	hv := w.index(t, w.node, "enia")
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.0.2.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}))
	return w
}

// TestRouteGetByRulePriority is the harm of #2048 on the model: a leaked
// `to X lookup main` at 512 beats the pod's own `from Y lookup 2` at 1536.
func TestRouteGetByRulePriority(t *testing.T) {
	w := lookupWorld(t)
	fromPod := kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.0.2.11"), IifName: "enia"}
	res, err := w.node.RouteGet(fromPod)
	must(t, err)
	if res.LinkName != "eth1" || res.RulePrio != 1536 || res.Table != 2 || !res.Gw.Equal(ip("10.0.2.1")) {
		t.Fatalf("before the leak: %+v", res)
	}
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.99/32"), Table: kernel.TableMain}))
	res, err = w.node.RouteGet(fromPod)
	must(t, err)
	if res.LinkName != "eth0" || res.RulePrio != 512 || res.Table != kernel.TableMain {
		t.Fatalf("after the leak: %+v", res)
	}
}

func TestRouteGet(t *testing.T) {
	w := lookupWorld(t)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "enia", Table: 2}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 20, Family: kernel.FamilyV4, OifName: "eth0", Table: 2}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 30, Family: kernel.FamilyV4, Mark: 1, Table: 2}))
	must(t, w.node.RouteAdd(kernel.Route{Table: 50, Dst: cidr("10.0.0.0/8"), LinkIndex: w.eth0, Scope: kernel.ScopeLink}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 40, Dst: cidr("10.9.0.0/16"), Table: 60})) // empty table: the walk goes on
	for _, tc := range []struct {
		name     string
		q        kernel.RouteQuery
		link     string
		table    int
		prio     int
		wantErr  syscall.Errno
		wantGwIP string
	}{
		{"local traffic skips iif, oif and mark rules", kernel.RouteQuery{Dst: ip("10.0.1.99")}, "eth0", 254, 32766, 0, ""},
		{"iif rule matches its interface", kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.0.2.11"), IifName: "enia"}, "eth1", 2, 10, 0, "10.0.2.1"},
		{"longest prefix within main", kernel.RouteQuery{Dst: ip("10.0.2.11")}, "enia", 254, 32766, 0, ""},
		{"connected route", kernel.RouteQuery{Dst: ip("10.0.1.7")}, "eth0", 254, 32766, 0, ""},
		{"local address: lo, local table", kernel.RouteQuery{Dst: ip("10.0.1.10")}, "lo", 255, 0, 0, ""},
		{"local source", kernel.RouteQuery{Dst: ip("198.51.100.1"), Src: ip("10.0.2.10")}, "eth0", 254, 32766, 0, "10.0.1.1"},
		{"non-local source, output", kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.9.9.9")}, "", 0, 0, syscall.ENETUNREACH, ""},
		{"input without source", kernel.RouteQuery{Dst: ip("10.0.1.99"), IifName: "eth0"}, "", 0, 0, syscall.EINVAL, ""},
		{"input from a local source", kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.0.2.10"), IifName: "eth0"}, "", 0, 0, syscall.EINVAL, ""},
		{"missing iif", kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.9.9.9"), IifName: "nope"}, "", 0, 0, syscall.ENODEV, ""},
		{"no destination", kernel.RouteQuery{}, "", 0, 0, syscall.EINVAL, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := w.node.RouteGet(tc.q)
			wantErrno(t, err, tc.wantErr)
			if err != nil {
				return
			}
			if res.LinkName != tc.link || res.Table != tc.table || res.RulePrio != tc.prio || (tc.wantGwIP != "" && !res.Gw.Equal(ip(tc.wantGwIP))) {
				t.Fatalf("%+v, want %s table %d rule %d gw %s", res, tc.link, tc.table, tc.prio, tc.wantGwIP)
			}
		})
	}
	// An "iif lo" rule matches locally generated traffic, as in Linux.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 5, Family: kernel.FamilyV4, IifName: "lo", Table: 50}))
	if res, _ := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.99")}); res.RulePrio != 5 || res.Table != 50 {
		t.Fatalf("iif lo: %+v", res)
	}
	// Forwarding off: input lookups that would be forwarded are EHOSTUNREACH.
	must(t, w.node.SysctlSet("net/ipv4/conf/enia/forwarding", "0"))
	_, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.99"), Src: ip("10.0.2.11"), IifName: "enia"})
	wantErrno(t, err, syscall.EHOSTUNREACH)
	res, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.10"), Src: ip("10.0.2.11"), IifName: "enia"})
	must(t, err)
	if res.LinkName != "lo" {
		t.Fatalf("local delivery needs no forwarding: %+v", res)
	}
	// Nothing at all: ENETUNREACH.
	for _, p := range []int{0, 5, 10, 20, 30, 40, 1536, 32766, 32767} {
		for w.node.RuleDel(kernel.Rule{Priority: p, Family: kernel.FamilyV4}) == nil {
		}
	}
	_, err = w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.99")})
	wantErrno(t, err, syscall.ENETUNREACH)
}

func TestRouteGetIPv6(t *testing.T) {
	w := newWorld(t)
	hv := w.index(t, w.node, "enia")
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8:1::10/64")))
	must(t, w.node.RouteAdd(kernel.Route{Gw: ip("fe80::1"), LinkIndex: w.eth0, Family: kernel.FamilyV6}))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:1::11/128"), LinkIndex: hv}))
	must(t, w.node.RouteAdd(kernel.Route{Table: 3, Dst: cidr("2001:db8:7::/64"), LinkIndex: hv}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("2001:db8:7::/64"), Table: 3}))
	for _, tc := range []struct {
		q     kernel.RouteQuery
		link  string
		table int
	}{
		{kernel.RouteQuery{Dst: ip("2001:db8:1::11")}, "enia", 254},
		{kernel.RouteQuery{Dst: ip("2001:db8:1::99")}, "eth0", 254},
		{kernel.RouteQuery{Dst: ip("2600::1")}, "eth0", 254},
		{kernel.RouteQuery{Dst: ip("2001:db8:7::1")}, "enia", 3},
		{kernel.RouteQuery{Dst: ip("2001:db8:1::10")}, "lo", 255},
		// IPv6 input lookups: no source needed, no forwarding check.
		{kernel.RouteQuery{Dst: ip("2600::1"), IifName: "enia"}, "eth0", 254},
	} {
		res, err := w.node.RouteGet(tc.q)
		must(t, err)
		if res.LinkName != tc.link || res.Table != tc.table {
			t.Errorf("%+v: %+v, want %s table %d", tc.q, res, tc.link, tc.table)
		}
	}
}
