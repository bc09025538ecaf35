package ownership

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ifAddr(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// node builds a model node: eth0 the primary ENI (10.0.1.10/24, an IPv6
// /128 whose /64 comes from a router advertisement, the default routes),
// eth1 and eth2 secondary ENIs as ipamd configures them (rule 32765 to
// tables 2 and 3), eth2 in eth0's subnet as EC2 allows, and eth3 a trunk
// ENI (an address, neither a default route nor rule 32765).
func node(t *testing.T) kernel.API {
	t.Helper()
	k := model.New()
	must(t, k.AddNamespace("node"))
	h, err := k.Open("node")
	must(t, err)
	idx := map[string]int{}
	for _, name := range []string{"eth0", "eth1", "eth2", "eth3"} {
		i, err := k.AddDevice("node", name, 9001, nil)
		must(t, err)
		must(t, h.LinkSetUp(name))
		idx[name] = i
	}
	for name, a := range map[string][]string{"eth0": {"10.0.1.10/24", "2600:1f14:a:1::a/128"}, "eth1": {"10.0.2.10/24"},
		"eth2": {"10.0.1.20/24"}, "eth3": {"10.0.9.10/24"}} {
		for _, s := range a {
			must(t, h.AddrAdd(idx[name], ifAddr(s)))
		}
	}
	must(t, h.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: idx["eth0"], Family: kernel.FamilyV4}))
	must(t, h.RouteAdd(kernel.Route{Gw: net.ParseIP("fe80::1"), LinkIndex: idx["eth0"], Family: kernel.FamilyV6}))
	must(t, h.RouteAdd(kernel.Route{Dst: ifAddr("2600:1f14:a:1::/64"), LinkIndex: idx["eth0"]}))
	// Foreign on-link IPv4 routes prove nothing about subnets.
	must(t, h.RouteAdd(kernel.Route{Dst: ifAddr("192.168.7.0/24"), LinkIndex: idx["eth1"], Scope: kernel.ScopeLink}))
	must(t, h.RouteAdd(kernel.Route{Table: 2, Dst: ifAddr("192.168.8.0/24"), LinkIndex: idx["eth1"], Scope: kernel.ScopeLink}))
	for dev, table := range map[string]int{"10.0.2.10/32": 2, "10.0.1.20/32": 3} {
		must(t, h.RuleAdd(kernel.Rule{Priority: PrioENI, Family: kernel.FamilyV4, Src: ifAddr(dev), Table: table}))
	}
	return h
}

// TestReadNodeTablesOfAddresses: which tables an address's pod may use, as
// the node shows it, and every address refused with its reason.
func TestReadNodeTablesOfAddresses(t *testing.T) {
	n, err := ReadNode(node(t))
	must(t, err)
	for _, c := range []struct {
		addr   string
		tables []int
		why    string
	}{
		{"10.0.1.11", []int{3, kernel.TableMain}, ""}, // eth0 and eth2 share the subnet
		{"10.0.2.11", []int{2}, ""},
		{"2600:1f14:a:1::5", []int{kernel.TableMain}, ""}, // the /64 of the RA route
		{"10.0.1.10", nil, "node's own address (on eth0)"},
		{"10.0.1.20", nil, "node's own address (on eth2)"},
		{"10.0.9.11", nil, "in no subnet"}, // the trunk's subnet is no pod's
		{"192.168.7.7", nil, "in no subnet"},
		{"192.168.8.7", nil, "in no subnet"},
		{"10.99.0.5", nil, "in no subnet"},
		{"127.0.0.1", nil, "cannot be a pod address"},
		{"fe80::5", nil, "cannot be a pod address"},
	} {
		got, err := n.PodTables(netip.MustParseAddr(c.addr))
		if c.why == "" {
			if err != nil || !slices.Equal(got, c.tables) {
				t.Errorf("%s: %v %v, want %v", c.addr, got, err, c.tables)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v %v, want refused: %s", c.addr, got, err, c.why)
		}
	}
	if !strings.Contains(n.describe(), "eth1 (10.0.2.0/24, table 2)") || strings.Contains(n.describe(), "eth3") {
		t.Errorf("the ENIs read: %s", n.describe())
	}
}

// counting counts the requests that cost a DEL one per ENI.
type counting struct {
	kernel.API
	routeLists, linkLookups int
}

func (c *counting) RouteListLink(f kernel.Family, table, idx int) ([]kernel.Route, error) {
	c.routeLists++
	return c.API.RouteListLink(f, table, idx)
}

func (c *counting) LinkByIndex(idx int) (kernel.Link, error) {
	c.linkLookups++
	return c.API.LinkByIndex(idx)
}

// TestReadNodeForAnswersAsReadNode: for the addresses it is asked about,
// the targeted reading answers PodTables and IsOwnAddress exactly as the
// whole node's of that family does (the same tables, the same refusal,
// which names every ENI), with fewer
// requests: an IPv4 pod of a secondary ENI needs no route and no name,
// one of the primary ENI eth0's routes.
func TestReadNodeForAnswersAsReadNode(t *testing.T) {
	h := node(t)
	for _, s := range []string{"10.0.1.11", "10.0.2.11", "2600:1f14:a:1::5", "10.0.1.10", "10.0.1.20", "10.0.9.11",
		"192.168.7.7", "10.99.0.5", "127.0.0.1", "fe80::5"} {
		a := netip.MustParseAddr(s)
		fam := kernel.FamilyV4
		if a.Is6() {
			fam = kernel.FamilyV6
		}
		rules, err := h.RuleList(fam)
		must(t, err)
		whole, err := ReadNodeFamily(h, fam, rules)
		must(t, err)
		c := &counting{API: h}
		part, err := ReadNodeFor(c, rules, []netip.Addr{a})
		must(t, err)
		wt, werr := whole.PodTables(a)
		pt, perr := part.PodTables(a)
		if !slices.Equal(wt, pt) || (werr == nil) != (perr == nil) || (werr != nil && werr.Error() != perr.Error()) {
			t.Errorf("%s: whole node %v %v, targeted %v %v", s, wt, werr, pt, perr)
		}
		if whole.IsOwnAddress(a) != part.IsOwnAddress(a) {
			t.Errorf("%s: own address %v, targeted %v", s, whole.IsOwnAddress(a), part.IsOwnAddress(a))
		}
		want := map[string]int{"10.0.2.11": 0, "10.0.1.11": 1}[s] // eth1 has rule 32765; eth0 and eth2 share 10.0.1.0/24, eth2 has its rule
		if (s == "10.0.2.11" || s == "10.0.1.11") && c.routeLists != want {
			t.Errorf("%s: %d route listings, want %d", s, c.routeLists, want)
		}
		if s == "10.0.2.11" && c.linkLookups > 1 {
			t.Errorf("%s: %d link lookups, want at most its ENI's", s, c.linkLookups)
		}
	}
}

// TestScopeOwns: the node and the pool together decide a 512 or 1536 rule;
// a 1536 rule must be in a table of the address's ENI.
func TestScopeOwns(t *testing.T) {
	n, err := ReadNode(node(t))
	must(t, err)
	pool := func(a netip.Addr) bool { return a != netip.MustParseAddr("10.0.2.99") }
	s := Scope{Node: n, InPool: pool}
	a := netip.MustParseAddr("10.0.2.11")
	for _, c := range []struct {
		rule kernel.Rule
		want bool
	}{
		{ToPodRule(a), true},
		{FromPodRule(a, 2), true},
		{FromPodRule(a, 3), false},                               // eth2's table, not eth1's
		{FromPodRule(netip.MustParseAddr("10.0.1.11"), 3), true}, // eth2 shares eth0's subnet
		{ToPodRule(netip.MustParseAddr("10.0.2.99")), false},     // not in the pool
		{ToPodRule(netip.MustParseAddr("10.0.2.10")), false},     // eth1's own
		{IIFRule(kernel.FamilyV4, "vlan0761ccbeace", 107), true}, // keyed by a link, not an address
	} {
		if _, got := s.Owns(c.rule); got != c.want {
			t.Errorf("%s: owned %v, want %v", kernel.RuleString(c.rule), got, c.want)
		}
	}
}

// TestShadowedBy: a rule a delete request would reach first, or one that
// reads the same anywhere, shadows; a deleted one no longer does.
func TestShadowedBy(t *testing.T) {
	a := netip.MustParseAddr("10.0.2.11")
	pod := ToPodRule(a)
	withIif := pod
	withIif.IifName = "eth0"
	after := FromPodRule(a, 2)
	cases := []struct {
		name  string
		rules []kernel.Rule
		gone  []bool
		i     int
		want  bool
	}{
		{"alone", []kernel.Rule{pod, after}, nil, 0, false},
		{"a wider rule listed first", []kernel.Rule{withIif, pod}, nil, 1, true},
		{"a wider rule listed after", []kernel.Rule{pod, withIif}, nil, 0, false},
		{"a look-alike after", []kernel.Rule{pod, pod}, nil, 0, true},
		{"a look-alike already deleted", []kernel.Rule{pod, pod}, []bool{false, true}, 0, false},
	}
	for _, c := range cases {
		if _, _, got := ShadowedBy(c.rules, c.gone, c.i); got != c.want {
			t.Errorf("%s: shadowed %v, want %v", c.name, got, c.want)
		}
	}
}
