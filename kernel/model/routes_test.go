package model

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

func TestAddressRoutes(t *testing.T) {
	w := newWorld(t)
	idx, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	// Down: only the local-table route.
	must(t, w.node.AddrAdd(idx, cidr("10.0.2.10/24")))
	must(t, w.node.AddrAdd(idx, cidr("2001:db8:2::10/64")))
	wantErrno(t, w.node.AddrAdd(idx, cidr("10.0.2.10/24")), syscall.EEXIST)
	wantErrno(t, w.node.AddrAdd(idx, cidr("2001:db8:2::10/80")), syscall.EEXIST) // IPv6: the address alone
	must(t, w.node.AddrAdd(idx, cidr("10.0.2.10/16")))                           // IPv4: address and prefix
	wantErrno(t, w.node.AddrAdd(99, cidr("10.0.9.1/24")), syscall.ENODEV)
	if r := routesTo(t, w.node, "10.0.2.0/24"); len(r) != 0 {
		t.Fatalf("connected route on a down link: %+v", r)
	}
	if r := routesTo(t, w.node, "10.0.2.10/32"); len(r) != 1 || r[0].Table != kernel.TableLocal || r[0].Type != kernel.RouteTypeLocal ||
		r[0].Scope != kernel.ScopeHost {
		t.Fatalf("local route: %+v", r)
	}
	must(t, w.node.LinkSetUp("eth1"))
	r := routesTo(t, w.node, "10.0.2.0/24")
	if len(r) != 1 || r[0].Table != kernel.TableMain || r[0].Scope != kernel.ScopeLink || r[0].Protocol != protoKernel ||
		!r[0].Src.Equal(ip("10.0.2.10")) || r[0].LinkIndex != idx {
		t.Fatalf("connected route: %+v", r)
	}
	if r := routesTo(t, w.node, "2001:db8:2::/64"); len(r) != 1 || r[0].Priority != 256 || r[0].Src != nil {
		t.Fatalf("IPv6 connected route: %+v", r)
	}
	// Deleting by address and prefix length.
	wantErrno(t, w.node.AddrDel(idx, cidr("10.0.2.10/32")), syscall.EADDRNOTAVAIL)
	wantErrno(t, w.node.AddrDel(99, cidr("10.0.2.10/24")), syscall.ENODEV)
	must(t, w.node.AddrDel(idx, cidr("10.0.2.10/24")))
	if r := routesTo(t, w.node, "10.0.2.0/24"); len(r) != 0 {
		t.Fatalf("connected route survived its address: %+v", r)
	}
	if r := routesTo(t, w.node, "10.0.2.10/32"); len(r) != 1 {
		t.Fatalf("local route went while 10.0.2.10/16 still holds the address: %+v", r)
	}
	must(t, w.node.AddrDel(idx, cidr("2001:db8:2::10/64")))
	if r := routesTo(t, w.node, "2001:db8:2::/64"); len(r) != 0 {
		t.Fatalf("IPv6 connected route survived: %+v", r)
	}
}

// TestLastAddressFlush: Linux flushes a link's IPv4 routes and neighbours
// when its last IPv4 address goes, and routes using a deleted address as
// source anywhere (measured on the real kernel).
func TestLastAddressFlush(t *testing.T) {
	w := newWorld(t)
	hv := w.index(t, w.node, "enia")
	must(t, w.node.AddrAdd(hv, cidr("10.3.0.1/24")))
	must(t, w.node.AddrAdd(hv, cidr("10.4.0.1/24")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.20.0.0/16"), LinkIndex: hv, Scope: kernel.ScopeLink}))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.22.0.0/16"), LinkIndex: w.eth0, Scope: kernel.ScopeLink, Src: ip("10.4.0.1")}))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:30::/64"), LinkIndex: hv}))
	must(t, w.node.NeighSet(kernel.Neigh{LinkIndex: hv, IP: ip("10.3.0.9"), State: kernel.NeighStatePermanent}))
	must(t, w.node.NeighSet(kernel.Neigh{LinkIndex: hv, IP: ip("2001:db8::9"), State: kernel.NeighStatePermanent}))
	must(t, w.node.AddrDel(hv, cidr("10.4.0.1/24")))
	if len(routesTo(t, w.node, "10.22.0.0/16")) != 0 || len(routesTo(t, w.node, "10.20.0.0/16")) != 1 {
		t.Fatal("prefsrc route kept, or a route flushed too early")
	}
	must(t, w.node.AddrDel(hv, cidr("10.3.0.1/24")))
	if len(routesTo(t, w.node, "10.20.0.0/16")) != 0 || len(routesTo(t, w.node, "2001:db8:30::/64")) != 1 {
		t.Fatal("IPv4 routes must go with the last IPv4 address, IPv6 ones stay")
	}
	nb, _ := w.node.NeighList(hv, kernel.FamilyAll)
	if len(nb) != 1 || nb[0].IP.String() != "2001:db8::9" {
		t.Fatalf("neighbours after the last IPv4 address: %v", nb)
	}
}

func TestSecondaries(t *testing.T) {
	for _, promote := range []bool{false, true} {
		t.Run(fmt.Sprint("promote=", promote), func(t *testing.T) {
			w := newWorld(t)
			hv := w.index(t, w.node, "enia")
			if promote {
				must(t, w.node.SysctlSet("net/ipv4/conf/enia/promote_secondaries", "1"))
			}
			for _, a := range []string{"10.5.0.1/24", "10.5.0.2/24", "10.5.0.3/24"} {
				must(t, w.node.AddrAdd(hv, cidr(a)))
			}
			as, _ := w.node.AddrList(hv, kernel.FamilyV4)
			if as[0].Flags != kernel.AddrFlagPermanent || as[1].Flags != kernel.AddrFlagPermanent|addrFlagSecondary {
				t.Fatalf("flags %+v", as)
			}
			must(t, w.node.AddrDel(hv, cidr("10.5.0.1/24")))
			as, _ = w.node.AddrList(hv, kernel.FamilyV4)
			r := routesTo(t, w.node, "10.5.0.0/24")
			if !promote {
				if len(as) != 0 || len(r) != 0 {
					t.Fatalf("secondaries must go with their primary: %+v %+v", as, r)
				}
				return
			}
			if len(as) != 2 || as[0].Flags&addrFlagSecondary != 0 || len(r) != 1 || !r[0].Src.Equal(ip("10.5.0.2")) {
				t.Fatalf("promotion: %+v %+v", as, r)
			}
		})
	}
}

func TestRouteErrors(t *testing.T) {
	w := newWorld(t)
	down, _ := w.k.AddDevice("node", "eth9", 1500, nil)
	hv := w.index(t, w.node, "enia")
	must(t, w.node.RouteAdd(kernel.Route{Table: 8, Dst: cidr("10.77.0.1/32"), LinkIndex: hv, Scope: kernel.ScopeLink}))
	for _, tc := range []struct {
		name string
		r    kernel.Route
		want syscall.Errno
	}{
		{"no dst, gw or family", kernel.Route{LinkIndex: hv}, syscall.EINVAL},
		{"missing link", kernel.Route{Dst: cidr("10.5.0.0/16"), LinkIndex: 99}, syscall.ENODEV},
		{"no link", kernel.Route{Dst: cidr("10.5.0.0/16")}, syscall.ENODEV},
		{"link down", kernel.Route{Dst: cidr("10.5.0.0/16"), LinkIndex: down}, syscall.ENETDOWN},
		{"link down v6", kernel.Route{Dst: cidr("2001:db8:5::/64"), LinkIndex: down}, syscall.ENETDOWN},
		{"host bits v4", kernel.Route{Dst: cidr("10.5.0.1/16"), LinkIndex: hv}, syscall.EINVAL},
		{"host bits v6 are masked", kernel.Route{Dst: cidr("2001:db8:5::1/64"), LinkIndex: hv}, 0},
		{"gw unreachable", kernel.Route{Table: 5, Gw: ip("192.0.2.1"), LinkIndex: w.eth0}, syscall.ENETUNREACH},
		{"gw via main's connected route", kernel.Route{Table: 5, Gw: ip("10.0.1.1"), LinkIndex: w.eth0}, 0},
		{"gw on another device", kernel.Route{Table: 6, Gw: ip("10.0.1.1"), LinkIndex: hv}, syscall.ENETUNREACH},
		{"gw resolves the device", kernel.Route{Table: 7, Gw: ip("10.0.1.1")}, 0},
		{"gw in its own table", kernel.Route{Table: 8, Gw: ip("10.77.0.1"), LinkIndex: hv}, 0},
		{"gw only in another table", kernel.Route{Table: 9, Gw: ip("10.77.0.1"), LinkIndex: hv}, syscall.ENETUNREACH},
		{"mixed families", kernel.Route{Dst: cidr("10.5.0.0/16"), Gw: ip("fe80::1"), LinkIndex: hv}, syscall.EINVAL},
		{"prefsrc not local", kernel.Route{Dst: cidr("10.10.0.0/16"), LinkIndex: hv, Src: ip("10.99.0.1")}, syscall.EINVAL},
		{"v6 gw not on-link", kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("2001:db8:1::1"), LinkIndex: hv}, syscall.EHOSTUNREACH},
		{"v6 link-local gw without device", kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("fe80::1")}, syscall.EINVAL},
		{"v6 link-local gw", kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("fe80::1"), LinkIndex: hv}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErrno(t, w.node.RouteAdd(tc.r), tc.want) })
	}
	if r := routesTo(t, w.node, "default"); len(r) != 4 || r[1].Table != 7 || r[1].LinkIndex != w.eth0 {
		t.Fatalf("defaults: %+v", r)
	}
}

func TestRouteAddReplaceDel(t *testing.T) {
	w := newWorld(t)
	hv := w.index(t, w.node, "enia")
	r := kernel.Route{Dst: cidr("10.50.0.0/16"), LinkIndex: hv, Scope: kernel.ScopeLink}
	must(t, w.node.RouteAdd(r))
	wantErrno(t, w.node.RouteAdd(r), syscall.EEXIST)
	wantErrno(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.50.0.0/16"), LinkIndex: w.eth0}), syscall.EEXIST) // same key, other device
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.50.0.0/16"), LinkIndex: w.eth0, Priority: 7}))         // other metric
	must(t, w.node.RouteReplace(kernel.Route{Dst: cidr("10.50.0.0/16"), LinkIndex: w.eth0, Scope: kernel.ScopeLink}))
	got := routesTo(t, w.node, "10.50.0.0/16")
	if len(got) != 2 || got[0].LinkIndex != w.eth0 || got[0].Protocol != protoBoot {
		t.Fatalf("after replace: %+v", got)
	}
	must(t, w.node.RouteReplace(kernel.Route{Table: 3, Dst: cidr("10.51.0.0/16"), LinkIndex: hv})) // replace adds
	wantErrno(t, w.node.RouteDel(kernel.Route{Dst: cidr("10.50.0.0/16"), LinkIndex: hv}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Dst: cidr("10.50.0.0/16"), Scope: kernel.ScopeHost}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Table: 42, Dst: cidr("10.50.0.0/16")}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Dst: cidr("10.59.0.0/16")}), syscall.ESRCH)
	// Wildcards: the lowest metric goes first.
	must(t, w.node.RouteDel(kernel.Route{Dst: cidr("10.50.0.0/16")}))
	if got := routesTo(t, w.node, "10.50.0.0/16"); len(got) != 1 || got[0].Priority != 7 {
		t.Fatalf("after delete: %+v", got)
	}
	must(t, w.node.RouteDel(kernel.Route{Dst: cidr("10.50.0.0/16"), Priority: 7, LinkIndex: w.eth0}))
	must(t, w.node.RouteDel(kernel.Route{Table: 3, Dst: cidr("10.51.0.0/16")}))
	must(t, w.node.RouteDel(kernel.Route{Gw: ip("10.0.1.1")})) // the default route, by its gateway
	if r := routesTo(t, w.node, "default"); len(r) != 0 {
		t.Fatalf("default route left: %+v", r)
	}
	// IPv6: metric 1024 by default, duplicate per metric, replace by metric.
	v6 := kernel.Route{Dst: cidr("2001:db8:5::/64"), LinkIndex: hv}
	must(t, w.node.RouteAdd(v6))
	wantErrno(t, w.node.RouteAdd(v6), syscall.EEXIST)
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:5::/64"), LinkIndex: hv, Priority: 5}))
	must(t, w.node.RouteReplace(kernel.Route{Dst: cidr("2001:db8:5::/64"), LinkIndex: w.eth0}))
	got = routesTo(t, w.node, "2001:db8:5::/64")
	if len(got) != 2 || got[0].Priority != 1024 || got[0].LinkIndex != w.eth0 {
		t.Fatalf("IPv6 routes: %+v", got)
	}
	must(t, w.node.RouteDel(kernel.Route{Dst: cidr("2001:db8:5::/64")}))
	if got := routesTo(t, w.node, "2001:db8:5::/64"); len(got) != 1 || got[0].Priority != 1024 {
		t.Fatalf("IPv6 delete takes the lowest metric first: %+v", got)
	}
	// A default route on a device, no gateway: Family says which.
	must(t, w.node.RouteAdd(kernel.Route{Table: 11, Family: kernel.FamilyV4, LinkIndex: hv, Scope: kernel.ScopeLink}))
	lines := strings.Join(snapshot(t, w.node), "\n")
	if !strings.Contains(lines, "route table 11: default dev enia scope link") {
		t.Fatalf("dump:\n%s", lines)
	}
}

func TestNeighbours(t *testing.T) {
	w := newWorld(t)
	e0 := w.index(t, w.pod, "eth0")
	n := kernel.Neigh{LinkIndex: e0, IP: ip("169.254.1.1"), HardwareAddr: []byte{2, 0, 0, 0, 0, 1}, State: kernel.NeighStatePermanent}
	must(t, w.pod.NeighSet(n))
	n.HardwareAddr = []byte{2, 0, 0, 0, 0, 2}
	must(t, w.pod.NeighSet(n)) // replace
	wantErrno(t, w.pod.NeighSet(kernel.Neigh{LinkIndex: 42, IP: ip("169.254.1.1")}), syscall.ENODEV)
	nb, _ := w.pod.NeighList(0, kernel.FamilyV4)
	if len(nb) != 1 || nb[0].HardwareAddr.String() != "02:00:00:00:00:02" {
		t.Fatalf("neighbours %+v", nb)
	}
	if nb, _ := w.pod.NeighList(0, kernel.FamilyV6); len(nb) != 0 {
		t.Fatalf("family filter: %+v", nb)
	}
}
