package linux

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
)

// step is one operation of a sequence run on the real kernel and on the
// model; want is the errno Linux answers (0: success), measured here on
// every run.
type step struct {
	what string
	do   func(t *testing.T, w *world) error
	want syscall.Errno
}

func route(r kernel.Route, links ...string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error {
		if len(links) > 0 {
			r.LinkIndex = w.idx(t, w.node, links[0])
		}
		return w.node.RouteAdd(r)
	}
}

func routeDel(r kernel.Route, links ...string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error {
		if len(links) > 0 {
			r.LinkIndex = w.idx(t, w.node, links[0])
		}
		return w.node.RouteDel(r)
	}
}

func addr(link, a string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return w.node.AddrAdd(w.idx(t, w.node, link), cidr(a)) }
}

func addrDel(link, a string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return w.node.AddrDel(w.idx(t, w.node, link), cidr(a)) }
}

func rule(r kernel.Rule) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return w.node.RuleAdd(r) }
}

func ruleDel(r kernel.Rule) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return w.node.RuleDel(r) }
}

func sysctl(k, v string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return w.node.SysctlSet(k, v) }
}

func call(fn func(w *world) error) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return fn(w) }
}

var mac = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}

// errnoSteps exercises every API method and every error class the model
// claims, in an order where each step's state is the previous one's.
var errnoSteps = []step{
	// Links.
	{"bridge name of 16 bytes", call(func(w *world) error { return w.node.AddBridge("sixteen-chars-xx", 0) }), syscall.ERANGE},
	{"bridge name of 15 bytes", call(func(w *world) error { return w.node.AddBridge("fifteen-chars-x", 0) }), 0},
	{"veth name of 16 bytes", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "sixteen-chars-xx", PeerName: "hv1", PeerNamespace: w.node})
	}), syscall.ERANGE},
	{"veth peer name of 16 bytes", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "e1", PeerName: "sixteen-chars-xx", PeerNamespace: w.node})
	}), syscall.ERANGE},
	{"empty veth name", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "", PeerName: "hv1", PeerNamespace: w.node})
	}), syscall.EINVAL},
	{"empty veth peer name", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "e1", PeerName: "", PeerNamespace: w.node})
	}), syscall.EINVAL},
	{"veth into the node", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "eth0", MTU: 9001, PeerName: "enipod", PeerNamespace: w.node, PeerHardwareAddr: mac})
	}), 0},
	{"duplicate link name", call(func(w *world) error { return w.node.AddBridge("eth0", 0) }), syscall.EEXIST},
	{"peer name taken in the peer's namespace", call(func(w *world) error {
		return w.pod.AddVeth(kernel.VethSpec{Name: "e1", PeerName: "enipod", PeerNamespace: w.node})
	}), syscall.EEXIST},
	{"missing link by name", call(func(w *world) error { _, err := w.node.LinkByName("nope"); return err }), syscall.ENODEV},
	{"missing link by index", call(func(w *world) error { _, err := w.node.LinkByIndex(4242); return err }), syscall.ENODEV},
	{"delete missing link", call(func(w *world) error { return w.node.LinkDel("nope") }), syscall.ENODEV},
	{"delete lo", call(func(w *world) error { return w.node.LinkDel("lo") }), syscall.EOPNOTSUPP},
	{"set missing link up", call(func(w *world) error { return w.node.LinkSetUp("nope") }), syscall.ENODEV},
	{"MTU of a missing link", call(func(w *world) error { return w.node.LinkSetMTU("nope", 1500) }), syscall.ENODEV},
	{"MTU below 68", call(func(w *world) error { return w.node.LinkSetMTU("enipod", 67) }), syscall.EINVAL},
	{"MTU above a veth's maximum", call(func(w *world) error { return w.node.LinkSetMTU("enipod", 65536) }), syscall.EINVAL},
	{"MTU of one veth end", call(func(w *world) error { return w.node.LinkSetMTU("enipod", 1500) }), 0},
	{"delete a bridge", call(func(w *world) error { return w.node.LinkDel("fifteen-chars-x") }), 0},
	// Routes on a link that is down.
	{"IPv4 route on a down link", route(kernel.Route{Dst: cidr("10.2.0.0/16"), Scope: kernel.ScopeLink}, "enipod"), syscall.ENETDOWN},
	{"IPv6 route on a down link", route(kernel.Route{Dst: cidr("2001:db8:5::/64")}, "enipod"), syscall.ENETDOWN},
	{"address on a down link", addr("enipod", "169.254.1.1/32"), 0},
	{"set up", call(func(w *world) error { return w.node.LinkSetUp("enipod") }), 0},
	// Addresses.
	{"address", addr("eth0", "10.0.1.10/24"), 0},
	{"duplicate address", addr("eth0", "10.0.1.10/24"), syscall.EEXIST},
	{"same IPv4 address, other prefix", addr("eth0", "10.0.1.10/16"), 0},
	{"secondary address", addr("eth0", "10.0.1.20/24"), 0},
	{"IPv6 address", addr("eth0", "2001:db8:1::10/64"), 0},
	{"same IPv6 address, other prefix", addr("eth0", "2001:db8:1::10/80"), syscall.EEXIST},
	{"address on a missing link", call(func(w *world) error { return w.node.AddrAdd(4242, cidr("10.9.0.1/24")) }), syscall.ENODEV},
	{"delete missing address", addrDel("eth0", "10.0.1.99/24"), syscall.EADDRNOTAVAIL},
	{"delete with the wrong prefix length", addrDel("eth0", "10.0.1.10/32"), syscall.EADDRNOTAVAIL},
	{"delete the /16", addrDel("eth0", "10.0.1.10/16"), 0},
	{"address on eth1", addr("eth1", "10.0.2.10/24"), 0},
	// Routes.
	{"default route", route(kernel.Route{Gw: ip("10.0.1.1")}, "eth0"), 0},
	{"duplicate route", route(kernel.Route{Gw: ip("10.0.1.1")}, "eth0"), syscall.EEXIST},
	{"same key, other device", route(kernel.Route{Gw: ip("10.0.2.1")}, "eth1"), syscall.EEXIST},
	{"replace", call(func(w *world) error {
		return w.node.RouteReplace(kernel.Route{Gw: ip("10.0.1.1"), LinkIndex: w.idx(nil, w.node, "eth0")})
	}), 0},
	{"route on a missing link", route(kernel.Route{Dst: cidr("10.9.0.0/16"), LinkIndex: 4242}), syscall.ENODEV},
	{"route without link or gateway", route(kernel.Route{Dst: cidr("10.9.0.0/16")}), syscall.ENODEV},
	{"gateway with a missing link", route(kernel.Route{Dst: cidr("10.9.0.0/16"), Gw: ip("10.0.1.1"), LinkIndex: 4242}), syscall.ENETUNREACH},
	{"host bits", route(kernel.Route{Dst: cidr("10.9.0.1/16")}, "eth0"), syscall.EINVAL},
	{"unreachable gateway", route(kernel.Route{Table: 2, Gw: ip("192.0.2.1")}, "eth1"), syscall.ENETUNREACH},
	{"gateway on another device", route(kernel.Route{Table: 2, Gw: ip("10.0.1.1")}, "eth1"), syscall.ENETUNREACH},
	{"link route in table 2", route(kernel.Route{Table: 2, Dst: cidr("10.0.2.1/32"), Scope: kernel.ScopeLink}, "eth1"), 0},
	{"default in table 2", route(kernel.Route{Table: 2, Gw: ip("10.0.2.1")}, "eth1"), 0},
	{"gateway found through the rules", route(kernel.Route{Table: 3, Gw: ip("10.0.2.7")}), 0},
	{"link route only in table 2", route(kernel.Route{Table: 2, Dst: cidr("10.0.3.1/32"), Scope: kernel.ScopeLink}, "eth1"), 0},
	{"gateway only in another table", route(kernel.Route{Table: 4, Dst: cidr("10.8.0.0/16"), Gw: ip("10.0.3.1")}), syscall.ENETUNREACH},
	{"gateway in its own table", route(kernel.Route{Table: 2, Dst: cidr("10.8.0.0/16"), Gw: ip("10.0.3.1")}), 0},
	{"preferred source not local", route(kernel.Route{Dst: cidr("10.10.0.0/16"), Scope: kernel.ScopeLink, Src: ip("10.99.0.1")}, "eth0"), syscall.EINVAL},
	{"preferred source", route(kernel.Route{Dst: cidr("10.10.0.0/16"), Scope: kernel.ScopeLink, Src: ip("10.0.2.10")}, "eth0"), 0},
	{"pod route", route(kernel.Route{Dst: cidr("10.0.1.15/32"), Scope: kernel.ScopeLink}, "enipod"), 0},
	{"default on a device", route(kernel.Route{Table: 11, Family: kernel.FamilyV4, Scope: kernel.ScopeLink}, "eth1"), 0},
	{"IPv6 default via link-local", route(kernel.Route{Gw: ip("fe80::1"), Family: kernel.FamilyV6}, "eth0"), 0},
	{"IPv6 link-local gateway without device", route(kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("fe80::1")}), syscall.EINVAL},
	{"IPv6 gateway not on-link", route(kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("2001:db8:7::1")}, "eth0"), syscall.EHOSTUNREACH},
	{"IPv6 gateway on another device", route(kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("2001:db8:1::1")}, "eth1"), syscall.EHOSTUNREACH},
	{"IPv6 gateway is local", route(kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("2001:db8:1::10")}, "eth0"), syscall.EINVAL},
	{"IPv6 gateway on-link", route(kernel.Route{Dst: cidr("2001:db8:9::/64"), Gw: ip("2001:db8:1::1")}), 0},
	{"IPv6 host bits are masked", route(kernel.Route{Dst: cidr("2001:db8:8::1/64")}, "eth0"), 0},
	{"IPv6 duplicate", route(kernel.Route{Dst: cidr("2001:db8:8::/64")}, "eth0"), syscall.EEXIST},
	{"IPv6 other metric", route(kernel.Route{Dst: cidr("2001:db8:8::/64"), Priority: 5}, "eth1"), 0},
	{"IPv6 pod route", route(kernel.Route{Dst: cidr("2001:db8:1::15/128")}, "enipod"), 0},
	{"IPv6 delete, lowest metric first", routeDel(kernel.Route{Dst: cidr("2001:db8:8::/64")}), 0},
	{"delete missing route", routeDel(kernel.Route{Dst: cidr("10.9.0.0/16")}), syscall.ESRCH},
	{"delete on the wrong device", routeDel(kernel.Route{Dst: cidr("10.10.0.0/16")}, "eth1"), syscall.ESRCH},
	{"delete in a table that does not exist", routeDel(kernel.Route{Table: 99, Dst: cidr("10.10.0.0/16")}), syscall.ESRCH},
	{"delete a scope-link route without its scope", routeDel(kernel.Route{Dst: cidr("10.10.0.0/16")}), 0},
	// Rules.
	{"rule 512", rule(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}), 0},
	{"duplicate rule", rule(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}), syscall.EEXIST},
	{"rule 1536", rule(kernel.Rule{Priority: 1536, Src: cidr("10.0.1.15/32"), Table: 2}), 0},
	{"rule 1536 table 3", rule(kernel.Rule{Priority: 1536, Src: cidr("10.0.1.15/32"), Table: 3}), 0},
	{"IPv6 rule 512", rule(kernel.Rule{Priority: 512, Dst: cidr("2001:db8:1::15/128"), Table: kernel.TableMain}), 0},
	{"IPv6 rule 1536", rule(kernel.Rule{Priority: 1536, Src: cidr("2001:db8:1::15/128"), Table: 2}), 0},
	{"rule with the kernel's priority", rule(kernel.Rule{Family: kernel.FamilyV4, Src: cidr("10.0.2.10/32"), Table: 2}), 0},
	{"IPv6 rule with the kernel's priority", rule(kernel.Rule{Family: kernel.FamilyV6, Src: cidr("2001:db8:1::10/128"), Table: 2}), 0},
	{"IPv4 rule without table", rule(kernel.Rule{Priority: 600, Dst: cidr("10.6.0.0/16")}), 0},
	{"IPv6 rule without table", rule(kernel.Rule{Priority: 600, Dst: cidr("2001:db8:6::/64")}), syscall.EINVAL},
	{"rule with host bits", rule(kernel.Rule{Priority: 601, Src: cidr("10.1.2.3/16"), Table: 5}), 0},
	{"rule mixing families", rule(kernel.Rule{Priority: 602, Src: cidr("10.0.0.1/32"), Dst: cidr("2001:db8::1/128"), Table: 5}), syscall.EINVAL},
	{"rule naming a missing interface", rule(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "nope0", Table: 7}), 0},
	{"rule with a fwmark", rule(kernel.Rule{Priority: 603, Family: kernel.FamilyV4, Mark: 0x80, Table: 7}), 0},
	{"rule interface name of 16 bytes", rule(kernel.Rule{Priority: 11, Family: kernel.FamilyV4, IifName: "sixteen-chars-xx", Table: 7}), syscall.ERANGE},
	{"delete by priority and source: the first", ruleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.1.15/32")}), 0},
	{"delete by interface only", ruleDel(kernel.Rule{IifName: "nope0"}), 0},
	{"delete missing rule", ruleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.1.15/32"), Table: 2}), syscall.ENOENT},
	{"delete IPv6 by priority", ruleDel(kernel.Rule{Priority: 600, Family: kernel.FamilyV6}), syscall.ENOENT},
	// Neighbours.
	{"permanent neighbour", call(func(w *world) error {
		e0 := w.idx(nil, w.pod, "eth0")
		return w.pod.NeighSet(kernel.Neigh{LinkIndex: e0, IP: ip("169.254.1.1"), HardwareAddr: mac, State: kernel.NeighStatePermanent})
	}), 0},
	{"neighbour replaced", call(func(w *world) error {
		e0 := w.idx(nil, w.pod, "eth0")
		return w.pod.NeighSet(kernel.Neigh{LinkIndex: e0, IP: ip("169.254.1.1"), HardwareAddr: mac, State: kernel.NeighStatePermanent})
	}), 0},
	{"neighbour on a missing link", call(func(w *world) error {
		return w.node.NeighSet(kernel.Neigh{LinkIndex: 4242, IP: ip("10.0.1.9"), HardwareAddr: mac, State: kernel.NeighStatePermanent})
	}), syscall.ENODEV},
	// Sysctls.
	{"ip_forward", sysctl("net/ipv4/ip_forward", "1"), 0},
	{"a link's key", sysctl("net/ipv6/conf/enipod/accept_ra", "0"), 0},
	{"a missing link's key", sysctl("net/ipv6/conf/nope/accept_ra", "0"), syscall.ENOENT},
	{"a missing leaf", sysctl("net/ipv4/conf/eth0/nonexistent", "1"), syscall.ENOENT},
	{"a read-only key", sysctl("net/ipv4/conf/eth0/mc_forwarding", "1"), syscall.EACCES},
	{"not a number", sysctl("net/ipv4/conf/eth0/rp_filter", "abc"), syscall.EINVAL},
	{"IPv6 mtu below 1280", sysctl("net/ipv6/conf/eth0/mtu", "1000"), syscall.EINVAL},
	{"disable IPv6 on eth1", sysctl("net/ipv6/conf/eth1/disable_ipv6", "1"), 0},
	{"IPv6 address with IPv6 disabled", addr("eth1", "2001:db8:2::10/64"), syscall.EACCES},
	{"IPv6 route with IPv6 disabled", route(kernel.Route{Dst: cidr("2001:db8:2::/64")}, "eth1"), syscall.EACCES},
	{"IPv6 neighbour with IPv6 disabled", call(func(w *world) error {
		return w.node.NeighSet(kernel.Neigh{LinkIndex: w.idx(nil, w.node, "eth1"), IP: ip("2001:db8:2::9"), HardwareAddr: mac, State: kernel.NeighStatePermanent})
	}), syscall.EINVAL},
	{"enable IPv6 on eth1", sysctl("net/ipv6/conf/eth1/disable_ipv6", "0"), 0},
	// Lookups.
	{"lookup, no route", call(func(w *world) error {
		_, err := w.pod.RouteGet(kernel.RouteQuery{Dst: ip("192.0.2.1")})
		return err
	}), syscall.ENETUNREACH},
	{"IPv6 lookup, no route", call(func(w *world) error {
		_, err := w.pod.RouteGet(kernel.RouteQuery{Dst: ip("2600::1")})
		return err
	}), syscall.ENETUNREACH},
	{"lookup on a missing interface", call(func(w *world) error {
		_, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.0.2.77"), IifName: "nope"})
		return err
	}), syscall.ENODEV},
	{"IPv4 input lookup without source", call(func(w *world) error {
		_, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), IifName: "eth1"})
		return err
	}), syscall.EINVAL},
	{"output lookup from a foreign source", call(func(w *world) error {
		_, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.9.9.9")})
		return err
	}), syscall.ENETUNREACH},
	{"stop forwarding on eth1", sysctl("net/ipv4/conf/eth1/forwarding", "0"), 0},
	{"input lookup on a link that does not forward", call(func(w *world) error {
		_, err := w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.0.2.77"), IifName: "eth1"})
		return err
	}), syscall.EHOSTUNREACH},
	// Deletions: the last IPv4 address of eth1 takes its IPv4 routes.
	{"delete eth1's address", addrDel("eth1", "10.0.2.10/24"), 0},
	{"delete the primary: its secondary goes too", addrDel("eth0", "10.0.1.10/24"), 0},
	{"readd eth0's address", addr("eth0", "10.0.1.10/24"), 0},
}

// TestErrnosAndDumpsMatch runs errnoSteps on Linux and on the model: every
// step must answer the errno Linux answers, and the two namespaces' dumps
// must be equal at the end.
func TestErrnosAndDumpsMatch(t *testing.T) {
	ws := both(t)
	for _, s := range errnoSteps {
		for _, w := range ws {
			if got := errnoOf(s.do(t, w)); got != s.want {
				t.Errorf("%s on %s: errno %v (%d), want %v (%d)", s.what, w.name, got, int(got), s.want, int(s.want))
			}
		}
	}
	settle(t, ws[0])
	compareDumps(t, "after the errno steps", ws)
	must(t, ws[0].pod.LinkDel("eth0"))
	must(t, ws[1].pod.LinkDel("eth0"))
	compareDumps(t, "after deleting the pod's veth", ws)
}

func compareDumps(t *testing.T, stage string, ws []*world) {
	t.Helper()
	for _, ns := range []string{"node", "pod"} {
		var got [2]string
		for i, w := range ws {
			h := w.node
			if ns == "pod" {
				h = w.pod
			}
			got[i] = strings.Join(lines(t, h), "\n")
		}
		if got[0] != got[1] {
			t.Errorf("%s, %s namespace: dumps differ\n%s", stage, ns, lineDiff(got[0], got[1]))
		}
	}
}

func lineDiff(real, model string) string {
	r := kernel.State{Links: strings.Split(real, "\n")}
	m := kernel.State{Links: strings.Split(model, "\n")}
	onlyReal, onlyModel := kernel.Diff(m, r)
	return fmt.Sprintf("only on Linux:\n  %s\nonly in the model:\n  %s", strings.Join(onlyReal, "\n  "), strings.Join(onlyModel, "\n  "))
}

// TestVlanErrno: AddVlan answers what the kernel answers; without 802.1Q
// in this kernel that is not what the model says, so only a kernel with
// VLAN support compares them: elsewhere the comparison is a skip, with
// the reason, once AddVlan is seen to fail.
func TestVlanErrno(t *testing.T) {
	testns.Require(t)
	ok, reason := testns.VlanSupported()
	ws := both(t)
	err := ws[0].node.AddVlan(kernel.VlanSpec{Name: "vlan.eth.9", ParentIndex: 4242, VlanID: 9})
	if !ok {
		if err == nil {
			t.Fatal("AddVlan succeeded on a kernel said to lack VLAN support")
		}
		t.Skipf("VLAN links unavailable, AddVlan not compared with the model (it answers %v): %s", err, reason)
	}
	if got, want := errnoOf(err), errnoOf(ws[1].node.AddVlan(kernel.VlanSpec{Name: "vlan.eth.9", ParentIndex: 4242, VlanID: 9})); got != want {
		t.Fatalf("missing parent: linux %v, model %v", got, want)
	}
	for _, w := range ws {
		must(t, w.node.AddVlan(kernel.VlanSpec{Name: "vlan.eth.9", ParentIndex: w.idx(t, w.node, "eth1"), VlanID: 9}))
	}
	compareDumps(t, "with a VLAN", ws)
}
