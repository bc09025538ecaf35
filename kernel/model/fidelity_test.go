package model

import (
	"net"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// One test per disagreement with Linux that kernel/linux's
// TestDifferential found and the model was fixed for; the Linux answer
// each expects is the one measured there.

func getOK(t *testing.T, api kernel.API, q kernel.RouteQuery) kernel.RouteResult {
	t.Helper()
	res, err := api.RouteGet(q)
	must(t, err)
	return res
}

func routeLines(t *testing.T, api kernel.API) map[string]bool {
	t.Helper()
	s, err := kernel.Snapshot(api)
	must(t, err)
	out := map[string]bool{}
	for _, l := range s.Routes {
		out[l] = true
	}
	return out
}

// An add is EEXIST when an existing rule matches with the new rule's
// unset addresses as wildcards; not the other way round.
func TestRuleAddUnsetSelectorsAreWildcards(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Src: cidr("10.0.2.11/32"), Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}))
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}), syscall.EEXIST)
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Table: kernel.TableMain}), syscall.EEXIST)
	// Other fields still tell rules apart, and a set selector must match.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: 2}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), IifName: "eth0", Table: kernel.TableMain}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 513, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}))
	// The reverse order adds both.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 600, Dst: cidr("10.0.1.16/32"), Table: kernel.TableMain}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 600, Src: cidr("10.0.2.11/32"), Dst: cidr("10.0.1.16/32"), Table: kernel.TableMain}))
	// IPv6 alike.
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Src: cidr("2001:db8::11/128"), Table: 2}))
	wantErrno(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Table: 2}), syscall.EEXIST)
}

// The duplicate check runs before an IPv4 rule without table gets one,
// and a table an IPv4 rule names is not created: "lookup 1" then a rule
// without table gives a second rule on table 1.
func TestRuleAddTableZeroAfterDuplicateCheck(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Table: 1}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4}))
	if got := rulesAt(t, w.node, 512); len(got) != 2 || got[1].Table != 1 {
		t.Fatalf("rules %+v, want two on table 1", got)
	}
}

// Tables exist per family: an IPv6 route in table 1 leaves IPv4's table
// 1 free for a rule without table.
func TestTablesPerFamily(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.RouteAdd(kernel.Route{Table: 1, Dst: cidr("2001:db8:9::/64"), LinkIndex: w.eth0}))
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 700, Mark: 0x80}))
	if got := rulesAt(t, w.node, 700); got[0].Table != 1 {
		t.Fatalf("rule got table %d, want 1", got[0].Table)
	}
}

// Deleting the IPv6 default route of a table that exists but has none is
// ENOENT (the table's root holds the null entry), ESRCH otherwise. An
// IPv6 rule creates its table; an IPv4 one does not.
func TestRouteDelIPv6DefaultENOENT(t *testing.T) {
	w := newWorld(t)
	v6def := kernel.Route{Family: kernel.FamilyV6}
	wantErrno(t, w.node.RouteDel(v6def), syscall.ENOENT) // main exists
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, LinkIndex: 1}), syscall.ENOENT)
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, LinkIndex: w.eth0}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Gw: ip("fe80::1"), LinkIndex: w.eth0}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, Priority: 5}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV4, Table: 2}), syscall.ESRCH)
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, Table: 2}), syscall.ESRCH) // no table 2
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 100, Family: kernel.FamilyV4, Table: 3}))
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, Table: 3}), syscall.ESRCH)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 100, Family: kernel.FamilyV6, Table: 2}))
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, Table: 2}), syscall.ENOENT)
	// With a default route there, a delete that matches none is ESRCH.
	must(t, w.node.RouteAdd(kernel.Route{Gw: ip("fe80::1"), LinkIndex: w.eth0, Family: kernel.FamilyV6}))
	wantErrno(t, w.node.RouteDel(kernel.Route{Family: kernel.FamilyV6, LinkIndex: 1}), syscall.ESRCH)
	must(t, w.node.RouteDel(v6def))
}

// Until an IPv4 rule is added or deleted, Linux keeps local merged into
// main: a local address answers as table main, and the longest prefix
// wins across the two (eth0's /24 over lo's local /16).
func TestIPv4MergedTablesUntilRulesChange(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.LinkSetUp("lo"))
	lo := w.index(t, w.node, "lo")
	must(t, w.node.AddrAdd(lo, cidr("10.0.2.10/16")))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.0.1.10")}); res.Table != kernel.TableMain || res.LinkName != "lo" {
		t.Fatalf("own address: %+v, want table main dev lo", res)
	}
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.0.1.1")}); res.LinkName != "eth0" {
		t.Fatalf("merged: %+v, want eth0's /24", res)
	}
	// A rule deleted (even the one re-added after) unmerges for good.
	must(t, w.node.RuleDel(kernel.Rule{Priority: 32767, Family: kernel.FamilyV4}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.0.1.1")}); res.LinkName != "lo" || res.Table != kernel.TableLocal {
		t.Fatalf("unmerged: %+v, want lo's local /16 through rule 0", res)
	}
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("127.0.0.1")}); res.Table != kernel.TableLocal {
		t.Fatalf("127.0.0.1: %+v", res)
	}
}

// IPv6 lookups ignore the rules until an IPv6 rule is added: deleting
// "0: lookup local" alone changes nothing.
func TestIPv6RulesIgnoredUntilOneIsAdded(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.RuleDel(kernel.Rule{Priority: 0, Family: kernel.FamilyV6, Table: kernel.TableLocal}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("2001:db8::10")}); res.Table != kernel.TableLocal || res.LinkName != "lo" {
		t.Fatalf("without IPv6 rules added: %+v, want local delivery", res)
	}
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 900, Family: kernel.FamilyV6, Table: 9}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("2001:db8::10")}); res.Table != kernel.TableMain || res.LinkName != "eth0" {
		t.Fatalf("after a rule add: %+v, want main's /64", res)
	}
}

// A veth's names are checked for emptiness, then length, both names
// first, and only then for use.
func TestAddVethNameCheckOrder(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		name, peer string
		want       syscall.Errno
	}{
		{"eth0", "", syscall.EINVAL},
		{"sixteen-chars-xx", "", syscall.EINVAL},
		{"eth0", "sixteen-chars-xx", syscall.ERANGE},
		{"eth0", "enia", syscall.EEXIST},
	} {
		wantErrno(t, w.node.AddVeth(kernel.VethSpec{Name: tc.name, PeerName: tc.peer}), tc.want)
	}
}

// An IPv4 neighbour on lo is keyed 0.0.0.0, one entry whatever address.
func TestNeighOnLoopback(t *testing.T) {
	w := newWorld(t)
	lo := w.index(t, w.node, "lo")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	for _, a := range []string{"10.0.1.1", "169.254.1.1"} {
		must(t, w.node.NeighSet(kernel.Neigh{LinkIndex: lo, IP: ip(a), HardwareAddr: mac, State: kernel.NeighStatePermanent}))
	}
	must(t, w.node.NeighSet(kernel.Neigh{LinkIndex: lo, IP: ip("2001:db8::1"), HardwareAddr: mac, State: kernel.NeighStatePermanent}))
	ns, err := w.node.NeighList(lo, kernel.FamilyAll)
	must(t, err)
	if len(ns) != 2 || !ns[0].IP.Equal(net.IPv4zero) || !ns[1].IP.Equal(ip("2001:db8::1")) {
		t.Fatalf("neighbours on lo: %+v", ns)
	}
}

// An address's connected route is added next to a user route to the
// same prefix on the same link.
func TestConnectedRouteBesideUserRoute(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.0.2.0/24"), Gw: ip("10.0.1.1"), LinkIndex: w.eth0}))
	must(t, w.node.AddrAdd(w.eth0, cidr("10.0.2.10/24")))
	got := routeLines(t, w.node)
	for _, want := range []string{"route table main: 10.0.2.0/24 via 10.0.1.1 dev eth0",
		"route table main: 10.0.2.0/24 dev eth0 proto kernel scope link src 10.0.2.10"} {
		if !got[want] {
			t.Errorf("missing %q in %v", want, got)
		}
	}
}

// What becomes of routes whose preferred source goes: IPv4 ones of main
// are deleted, other tables' stay; IPv6 ones lose it, but not when it
// goes with its link.
func TestPreferredSourceGone(t *testing.T) {
	w := newWorld(t)
	i1, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, w.node.LinkSetUp("eth1"))
	must(t, w.node.AddrAdd(i1, cidr("10.0.2.10/24")))
	must(t, w.node.AddrAdd(w.eth0, cidr("10.0.3.5/24")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.7.0.0/16"), Gw: ip("10.0.2.1"), LinkIndex: i1, Src: ip("10.0.3.5")}))
	must(t, w.node.RouteAdd(kernel.Route{Table: 2, Dst: cidr("10.7.0.0/16"), Gw: ip("10.0.2.1"), LinkIndex: i1, Src: ip("10.0.3.5")}))
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.AddrAdd(i1, cidr("2001:db8:2::10/64")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:9::/64"), LinkIndex: i1, Src: ip("2001:db8::10")}))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:8::/64"), LinkIndex: w.eth0, Src: ip("2001:db8::10")}))
	must(t, w.node.AddrDel(w.eth0, cidr("10.0.3.5/24")))
	must(t, w.node.AddrDel(w.eth0, cidr("2001:db8::10/64")))
	got := routeLines(t, w.node)
	for line, want := range map[string]bool{
		"route table main: 10.7.0.0/16 via 10.0.2.1 dev eth1 src 10.0.3.5": false,
		"route table 2: 10.7.0.0/16 via 10.0.2.1 dev eth1 src 10.0.3.5":    true,
		"route table main: 2001:db8:9::/64 dev eth1 metric 1024":           true,
		"route table main: 2001:db8:8::/64 dev eth0 metric 1024":           true,
	} {
		if got[line] != want {
			t.Errorf("%q present: %v, want %v", line, got[line], want)
		}
	}
	// The link going takes its routes; eth1's keep their source.
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:7::/64"), LinkIndex: i1, Src: ip("2001:db8::10")}))
	must(t, w.node.LinkDel("eth0"))
	if got := routeLines(t, w.node); !got["route table main: 2001:db8:7::/64 dev eth1 src 2001:db8::10 metric 1024"] {
		t.Errorf("eth1's route lost its source with eth0: %v", got)
	}
}

// An address on lo makes its whole subnet local: a preferred source or
// an output lookup's source in it is accepted.
func TestLoopbackSubnetIsLocal(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.LinkSetUp("lo"))
	lo := w.index(t, w.node, "lo")
	must(t, w.node.AddrAdd(lo, cidr("10.0.3.5/24")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.8.0.0/16"), Gw: ip("10.0.1.1"), LinkIndex: w.eth0, Src: ip("10.0.3.77")}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.0.3.5"), Src: ip("10.0.3.77")}); res.LinkName != "lo" {
		t.Fatalf("lookup from a lo subnet address: %+v", res)
	}
	wantErrno(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.9.0.0/16"), Gw: ip("10.0.1.1"), LinkIndex: w.eth0, Src: ip("10.0.4.1")}), syscall.EINVAL)
}

// A packet arriving with a local source: while the rules are the
// default ones and it does not leave by its input link, a martian when
// the source is a link's address; otherwise only when the source, looked
// up through the rules, is routed as local.
func TestMartianSource(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.SysctlSet("net/ipv4/ip_forward", "1"))
	i1, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, w.node.LinkSetUp("eth1"))
	must(t, w.node.AddrAdd(i1, cidr("10.0.2.10/24")))
	wantErrno(t, errOf(w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.0.2.10"), IifName: "eth1"})), syscall.EINVAL)
	// Deleting "0: lookup local" makes the local source an ordinary one.
	must(t, w.node.RuleDel(kernel.Rule{Priority: 0, Family: kernel.FamilyV4, Table: kernel.TableLocal}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.0.2.10"), IifName: "eth1"}); res.LinkName != "eth0" {
		t.Fatalf("forwarded: %+v", res)
	}
	// (Priority 0 would have the kernel pick one: 1 is the first.)
	must(t, w.node.RuleAdd(kernel.Rule{Priority: 1, Family: kernel.FamilyV4, Table: kernel.TableLocal}))
	wantErrno(t, errOf(w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.15"), Src: ip("10.0.2.10"), IifName: "eth1"})), syscall.EINVAL)
}

func errOf(_ kernel.RouteResult, err error) error { return err }

// A gateway that is a local address makes a host-scope nexthop: the
// lookup names the device and no gateway. That is decided when the route
// is added: the default route's gateway, added before, stays one when
// it becomes local (an address on lo whose subnet holds it).
func TestLocalGatewayIsNotUsed(t *testing.T) {
	w := newWorld(t)
	i1, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, w.node.LinkSetUp("eth1"))
	must(t, w.node.AddrAdd(i1, cidr("169.254.1.1/16")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.5.0.0/24"), Gw: ip("169.254.1.1"), LinkIndex: i1, Scope: kernel.ScopeLink}))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.5.0.1")}); res.LinkName != "eth1" || res.Gw != nil {
		t.Fatalf("%+v, want dev eth1 without gateway", res)
	}
	must(t, w.node.LinkSetUp("lo"))
	must(t, w.node.AddrAdd(w.index(t, w.node, "lo"), cidr("10.0.2.11/16")))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("10.1.2.3")}); !res.Gw.Equal(ip("10.0.1.1")) {
		t.Fatalf("default route: %+v, want via 10.0.1.1", res)
	}
}

// IPv6 input lookups prefer, among routes of one prefix and metric, the
// one on the input link.
func TestIPv6InputPrefersInputLink(t *testing.T) {
	w := newWorld(t)
	i1, _ := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, w.node.LinkSetUp("eth1"))
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.AddrAdd(i1, cidr("2001:db8::11/64")))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("2001:db8::1"), IifName: "eth1"}); res.LinkName != "eth1" {
		t.Fatalf("input from eth1: %+v", res)
	}
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("2001:db8::1")}); res.LinkName != "eth0" {
		t.Fatalf("output: %+v, want the older route", res)
	}
	// An output lookup comes from lo, but prefers no link.
	must(t, w.node.LinkSetUp("lo"))
	must(t, w.node.AddrAdd(1, cidr("2001:db8::12/64")))
	if res := getOK(t, w.node, kernel.RouteQuery{Dst: ip("2001:db8::1")}); res.LinkName != "eth0" {
		t.Fatalf("output with lo in the prefix: %+v, want the older route", res)
	}
}

// A route on lo does not make an IPv6 gateway on-link: EHOSTUNREACH,
// not the EINVAL of a gateway behind lo.
func TestIPv6GatewayNotOnLinkThroughLo(t *testing.T) {
	w := newWorld(t)
	must(t, w.pod.LinkSetUp("lo"))
	must(t, w.pod.RouteAdd(kernel.Route{Dst: cidr("2001:db8:1::/64"), LinkIndex: 1}))
	wantErrno(t, w.pod.RouteAdd(kernel.Route{Dst: cidr("2001:db8:1::15/128"), Gw: ip("2001:db8:1::1")}), syscall.EHOSTUNREACH)
}

// Deleting an IPv6 address deletes the first route to its prefix on its
// link without a gateway, lowest metric first, whoever made it.
func TestIPv6AddrDelTakesOnePrefixRoute(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.AddrAdd(w.eth0, cidr("2001:db8::10/64")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8::/64"), LinkIndex: w.eth0, Priority: 5}))
	must(t, w.node.AddrDel(w.eth0, cidr("2001:db8::10/64")))
	if rs := routesTo(t, w.node, "2001:db8::/64"); len(rs) != 1 || rs[0].Priority != 256 {
		t.Fatalf("left %+v, want the kernel's route (metric 256)", rs)
	}
}
