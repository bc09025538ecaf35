package driver

import (
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
	"github.com/vpccni/vpccni/ownership"
)

// The node the driver's tests assume, as ownership.ReadNode reads it: eth0
// is the primary ENI as the OS leaves it (10.0.1.10/24 and
// 2600:1f14:a:1::a/64, the default routes: its pods use main), eth1 a
// secondary ENI as ipamd configures it (10.0.2.10/24, rule 32765 to table
// 2). Pod addresses ip1 (10.0.2.11) and ip6 (2600:1f14:a:1::1) are theirs.
var (
	testLinks = []kernel.Link{{Index: 1, Name: "lo"}, {Index: 2, Name: "eth0", Kind: kernel.KindDevice}, {Index: 3, Name: "eth1", Kind: kernel.KindDevice}}
	testAddrs = []kernel.Addr{
		{LinkIndex: 2, IPNet: ifAddr("10.0.1.10/24")}, {LinkIndex: 2, IPNet: ifAddr("2600:1f14:a:1::a/64")},
		{LinkIndex: 3, IPNet: ifAddr("10.0.2.10/24")},
	}
	testENIRule = kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: cidr("10.0.2.10/32"), Table: 2}
	testRoutes  = []kernel.Route{
		{Table: kernel.TableMain, Gw: net.ParseIP("10.0.1.1"), LinkIndex: 2, Family: kernel.FamilyV4},
		{Table: kernel.TableMain, Gw: net.ParseIP("fe80::1"), LinkIndex: 2, Family: kernel.FamilyV6},
	}
)

// ifAddr is an interface address: the address itself with its prefix length.
func ifAddr(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return &net.IPNet{IP: ip, Mask: n.Mask}
}

// expectNode answers a mock node's ownership.ReadNode with the test node.
func expectNode(host *mock_kernel.MockAPI) {
	for _, l := range testLinks {
		host.EXPECT().LinkByIndex(l.Index).Return(l, nil).AnyTimes()
	}
	host.EXPECT().AddrList(0, kernel.FamilyAll).Return(testAddrs, nil).AnyTimes()
	host.EXPECT().RuleList(kernel.FamilyAll).Return([]kernel.Rule{testENIRule}, nil).AnyTimes()
	host.EXPECT().RouteList(kernel.FamilyAll, kernel.TableMain).Return(testRoutes, nil).AnyTimes()
	expectENIRoutes(host)
}

// expectENIRoutes answers the node reading's link-by-link listings of
// main with the test node's routes.
func expectENIRoutes(host *mock_kernel.MockAPI) {
	host.EXPECT().RouteListLink(gomock.Any(), kernel.TableMain, gomock.Any()).DoAndReturn(
		func(fam kernel.Family, _, idx int) ([]kernel.Route, error) {
			var out []kernel.Route
			for _, r := range testRoutes {
				if r.LinkIndex == idx && (fam == kernel.FamilyAll || r.Family == fam) {
					out = append(out, r)
				}
			}
			return out, nil
		}).AnyTimes()
}

// expectTeardownNode answers a mock node for one Teardown of a pod of
// family fam: one rule dump (rules, and for IPv4 the test node's ENI rule),
// the test node's addresses and main's routes of that family with routes
// added, and the holder check's lookups: the route of routes for exactly
// the asked address, else no route.
func expectTeardownNode(host *mock_kernel.MockAPI, fam kernel.Family, rules []kernel.Rule, routes ...kernel.Route) {
	for _, l := range testLinks {
		host.EXPECT().LinkByIndex(l.Index).Return(l, nil).AnyTimes()
	}
	var addrs []kernel.Addr
	for _, a := range testAddrs {
		if kernel.FamilyOf(a.IPNet.IP) == fam {
			addrs = append(addrs, a)
		}
	}
	host.EXPECT().AddrList(0, fam).Return(addrs, nil).AnyTimes()
	if fam == kernel.FamilyV4 {
		rules = append(slices.Clone(rules), testENIRule)
	}
	host.EXPECT().RuleList(fam).Return(rules, nil)
	var main []kernel.Route
	for _, r := range testRoutes {
		if r.Family == fam {
			main = append(main, r)
		}
	}
	host.EXPECT().RouteList(fam, kernel.TableMain).Return(append(main, routes...), nil).AnyTimes()
	expectENIRoutes(host)
	host.EXPECT().RouteGet(gomock.Any()).DoAndReturn(func(q kernel.RouteQuery) (kernel.RouteResult, error) {
		a, _ := netip.AddrFromSlice(q.Dst)
		for _, r := range routes {
			if samePrefix(r.Dst, ownership.HostPrefix(a.Unmap())) {
				return kernel.RouteResult{Table: r.Table, LinkIndex: r.LinkIndex, Route: r}, nil
			}
		}
		return kernel.RouteResult{}, syscall.ENETUNREACH
	}).AnyTimes()
}

// plugENIs gives a model node namespace the test node's ENIs.
func plugENIs(t *testing.T, k *model.Kernel, ns string, host kernel.API) {
	t.Helper()
	for _, name := range []string{"eth0", "eth1"} {
		if _, err := k.AddDevice(ns, name, 9001, nil); err != nil {
			t.Fatal(err)
		}
		if err := host.LinkSetUp(name); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range testAddrs {
		name := map[int]string{2: "eth0", 3: "eth1"}[a.LinkIndex]
		l, err := host.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := host.AddrAdd(l.Index, a.IPNet); err != nil {
			t.Fatal(err)
		}
	}
	eth0, _ := host.LinkByName("eth0")
	for _, r := range testRoutes {
		r.LinkIndex = eth0.Index
		if err := host.RouteAdd(r); err != nil {
			t.Fatalf("route %+v: %v", r, err)
		}
	}
	if err := host.RuleAdd(testENIRule); err != nil {
		t.Fatal(err)
	}
}
