package model

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// RouteGet answers the same with the lookup index as without, on nodes
// built at random from what a VPC CNI node holds: pod veths with their
// host routes, "to" and "from" rules at 512 and 1536 into several
// tables (addresses with host bits, duplicates, a leaked rule whose pod
// is gone), routes of several metrics in those tables, IPv4 and IPv6,
// and changes between the lookups (so a stale index would answer wrong).
func TestIndexedLookupsAnswerAsTheWalk(t *testing.T) {
	// Before any rule changes, IPv4 looks main and local up as one table.
	fresh := newWorld(t)
	for _, dst := range []string{"10.0.1.10", "10.0.1.5", "127.0.0.1", "8.8.8.8"} {
		q := kernel.RouteQuery{Dst: ip(dst)}
		indexLookups = true
		got, gotErr := fresh.node.RouteGet(q)
		indexLookups = false
		want, wantErr := fresh.node.RouteGet(q)
		indexLookups = true
		if fmt.Sprint(got, gotErr) != fmt.Sprint(want, wantErr) {
			t.Fatalf("default rules: route get %s: indexed %+v (%v), walked %+v (%v)", dst, got, gotErr, want, wantErr)
		}
	}
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		w := newWorld(t)
		eni1, err := w.k.AddDevice("node", "eth1", 9001, nil)
		must(t, err)
		must(t, w.node.LinkSetUp("eth1"))
		must(t, w.node.AddrAdd(eni1, cidr("10.0.2.10/24")))
		must(t, w.node.RouteAdd(kernel.Route{Gw: ip("10.0.2.1"), LinkIndex: eni1, Table: 2}))
		must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.0.2.0/24"), LinkIndex: eni1, Table: 2, Scope: kernel.ScopeLink}))
		must(t, w.node.RouteAdd(kernel.Route{Gw: ip("10.0.1.1"), LinkIndex: w.eth0, Table: 3, Priority: 10}))
		must(t, w.node.RouteAdd(kernel.Route{Gw: ip("10.0.2.1"), LinkIndex: eni1, Table: 3, Priority: 20}))
		var veths []string
		var named []net.IP // the addresses rules name: most queries are about them
		addr := func() net.IP {
			if len(named) > 0 && rng.IntN(3) > 0 {
				return named[rng.IntN(len(named))]
			}
			return ip(fmt.Sprintf("10.0.%d.%d", 1+rng.IntN(3), 2+rng.IntN(250)))
		}
		for i := range 40 {
			a := addr()
			if rng.IntN(4) > 0 { // a pod with its veth and host route
				pod := fmt.Sprintf("p%d-%d", seed, i)
				must(t, w.k.AddNamespace(pod))
				pn, err := w.k.Open(pod)
				must(t, err)
				hv := fmt.Sprintf("eni%d", i)
				if err := pn.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: hv, PeerNamespace: w.node, MTU: 9001}); err != nil {
					t.Fatal(err)
				}
				must(t, w.node.LinkSetUp(hv))
				l, err := w.node.LinkByName(hv)
				must(t, err)
				w.node.RouteAdd(kernel.Route{Dst: &net.IPNet{IP: a, Mask: net.CIDRMask(32, 32)}, LinkIndex: l.Index, Scope: kernel.ScopeLink})
				veths = append(veths, hv)
			}
			named = append(named, a)
			bits := 32
			if rng.IntN(15) == 0 {
				bits = 24 // (keeping its host bits)
			}
			n := &net.IPNet{IP: a, Mask: net.CIDRMask(bits, 32)}
			w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: n, Table: kernel.TableMain})
			w.node.RuleAdd(kernel.Rule{Priority: 1536, Src: n, Table: 2 + rng.IntN(2)})
			if len(veths) > 0 && rng.IntN(8) == 0 {
				w.node.RuleAdd(kernel.Rule{Priority: 10, IifName: veths[len(veths)-1], Table: 3})
			}
		}
		must(t, w.node.SysctlSet("net/ipv4/ip_forward", "1"))
		w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64"))
		w.node.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("2001:db8::20/128"), Table: 3})
		compare := func(q kernel.RouteQuery) {
			t.Helper()
			indexLookups = true
			got, gotErr := w.node.RouteGet(q)
			indexLookups = false
			want, wantErr := w.node.RouteGet(q)
			indexLookups = true
			if fmt.Sprint(got, gotErr) != fmt.Sprint(want, wantErr) {
				t.Fatalf("seed %d: route get %+v: indexed %+v (%v), walked %+v (%v)", seed, q, got, gotErr, want, wantErr)
			}
		}
		for range 300 {
			q := kernel.RouteQuery{Dst: addr()}
			switch rng.IntN(3) {
			case 0: // from a pod, in on its veth
				if len(veths) > 0 {
					q.IifName, q.Src = veths[rng.IntN(len(veths))], addr()
				}
			case 1: // from the node itself
				q.Src = ip("10.0.2.10")
			}
			if rng.IntN(20) == 0 {
				q = kernel.RouteQuery{Dst: ip("2001:db8::99"), Src: ip("2001:db8::20")}
			}
			compare(q)
			if rng.IntN(10) == 0 { // a change between lookups
				a := addr()
				if rng.IntN(2) == 0 {
					w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: &net.IPNet{IP: a, Mask: net.CIDRMask(32, 32)}, Table: kernel.TableMain})
				} else {
					w.node.RuleDel(kernel.Rule{Priority: 1536})
				}
				compare(kernel.RouteQuery{Dst: a})
			}
		}
	}
}
