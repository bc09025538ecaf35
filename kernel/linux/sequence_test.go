package linux

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// podSequence is a pod on the secondary ENI as the driver builds it, in
// both families: the node's ENI setup (eth1 with table 2), the veth with
// its peer in the node, the pod side (169.254.1.1 gateway, its address,
// a permanent neighbour), the node side (route to the pod, rules 512 and
// 1536). stage is called at each point worth comparing.
func podSequence(t *testing.T, w *world, stage func(string)) {
	n, p := w.node, w.pod
	must(t, n.SysctlSet("net/ipv4/ip_forward", "1"))
	must(t, n.SysctlSet("net/ipv6/conf/all/forwarding", "1"))
	eth0, eth1 := w.idx(t, n, "eth0"), w.idx(t, n, "eth1")
	must(t, n.AddrAdd(eth0, cidr("10.0.1.10/24")))
	must(t, n.AddrAdd(eth0, cidr("2001:db8:1::10/64")))
	must(t, n.AddrAdd(eth1, cidr("10.0.2.10/24")))
	must(t, n.RouteAdd(kernel.Route{Gw: ip("10.0.1.1"), LinkIndex: eth0}))
	must(t, n.RouteAdd(kernel.Route{Gw: ip("fe80::1"), LinkIndex: eth0, Family: kernel.FamilyV6}))
	must(t, n.RouteAdd(kernel.Route{Table: 2, Dst: cidr("10.0.2.1/32"), LinkIndex: eth1, Scope: kernel.ScopeLink}))
	must(t, n.RouteAdd(kernel.Route{Table: 2, Gw: ip("10.0.2.1"), LinkIndex: eth1}))
	must(t, n.RouteAdd(kernel.Route{Table: 2, Gw: ip("fe80::1"), LinkIndex: eth1, Family: kernel.FamilyV6}))
	must(t, n.RuleAdd(kernel.Rule{Priority: 32765, Src: cidr("10.0.2.10/32"), Table: 2}))
	stage("node ready")

	must(t, p.AddVeth(kernel.VethSpec{Name: "eth0", MTU: 9001, PeerName: "enihost", PeerNamespace: n, PeerHardwareAddr: mac}))
	must(t, n.SysctlSet("net/ipv6/conf/enihost/accept_ra", "0"))
	must(t, n.LinkSetUp("enihost"))
	must(t, p.LinkSetUp("eth0"))
	e0, hv := w.idx(t, p, "eth0"), w.idx(t, n, "enihost")
	must(t, p.RouteReplace(kernel.Route{Dst: cidr("169.254.1.1/32"), LinkIndex: e0, Scope: kernel.ScopeLink}))
	must(t, p.RouteReplace(kernel.Route{Gw: ip("169.254.1.1"), LinkIndex: e0, Family: kernel.FamilyV4}))
	must(t, p.RouteReplace(kernel.Route{Gw: ip("fe80::1"), LinkIndex: e0, Family: kernel.FamilyV6}))
	must(t, p.AddrAdd(e0, cidr("10.0.2.11/32")))
	must(t, p.AddrAdd(e0, cidr("2001:db8:2::11/128")))
	must(t, p.NeighSet(kernel.Neigh{LinkIndex: e0, IP: ip("169.254.1.1"), HardwareAddr: mac, State: kernel.NeighStatePermanent}))
	must(t, n.RouteReplace(kernel.Route{Dst: cidr("10.0.2.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink}))
	must(t, n.RouteReplace(kernel.Route{Dst: cidr("2001:db8:2::11/128"), LinkIndex: hv}))
	for _, r := range []kernel.Rule{
		{Priority: 512, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain},
		{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2},
		{Priority: 512, Dst: cidr("2001:db8:2::11/128"), Table: kernel.TableMain},
		{Priority: 1536, Src: cidr("2001:db8:2::11/128"), Table: 2},
	} {
		must(t, n.RuleAdd(r))
	}
	stage("pod up")

	// The #2048 leak: a stale "to X lookup main" for an address now in use
	// by a pod on another node beats the pod's own "from" rule.
	must(t, n.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.99/32"), Table: kernel.TableMain}))
	must(t, n.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("2001:db8:1::99/128"), Table: kernel.TableMain}))
	stage("stale rules")

	must(t, p.LinkDel("eth0"))
	stage("pod veth deleted")
}

// lookups are asked at every stage, of both implementations.
var lookups = []kernel.RouteQuery{
	{Dst: ip("10.0.2.11")},
	{Dst: ip("2001:db8:2::11")},
	{Dst: ip("10.0.1.99"), Src: ip("10.0.2.11"), IifName: "enihost"},
	{Dst: ip("2001:db8:1::99"), Src: ip("2001:db8:2::11"), IifName: "enihost"},
	{Dst: ip("198.51.100.7"), Src: ip("10.0.2.11"), IifName: "enihost"},
	{Dst: ip("2600::7"), Src: ip("2001:db8:2::11"), IifName: "enihost"},
	{Dst: ip("198.51.100.7"), Src: ip("10.0.2.10")},
	{Dst: ip("10.0.1.10")},
	{Dst: ip("2001:db8:1::10")},
	{Dst: ip("10.0.2.77"), Src: ip("10.0.1.50"), IifName: "eth0"},
	// The teardown's holder check: the entry itself (the pod's host
	// route, then, with the veth gone, the subnet's or the default).
	{Dst: ip("10.0.2.11"), FIBMatch: true},
	{Dst: ip("2001:db8:2::11"), FIBMatch: true},
	{Dst: ip("198.51.100.7"), FIBMatch: true},
}

// linkRoutes is RouteListLink of main for one link, as the kernel filters
// it (strict checking) and as the model does.
func linkRoutes(t *testing.T, api kernel.API, name string) string {
	l, err := api.LinkByName(name)
	if err != nil {
		return "no link"
	}
	rs, err := api.RouteListLink(kernel.FamilyAll, kernel.TableMain, l.Index)
	must(t, err)
	var out []string
	for _, r := range rs {
		if r.LinkIndex != l.Index || r.Table != kernel.TableMain {
			t.Errorf("RouteListLink(%s) returned %+v", name, r)
		}
		if r.Dst != nil && r.Family == kernel.FamilyV6 && r.Dst.IP.IsLinkLocalUnicast() {
			continue // the kernel's own, which the model leaves out (as kernel.Snapshot does)
		}
		out = append(out, fmt.Sprintf("%v via %v", r.Dst, r.Gw))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func answer(api kernel.API, q kernel.RouteQuery) string {
	res, err := api.RouteGet(q)
	if err != nil {
		return fmt.Sprintf("errno %d", errnoOf(err))
	}
	if q.FIBMatch {
		r := res.Route
		return fmt.Sprintf("entry %v table %s dev %s type %d", r.Dst, kernel.TableString(r.Table), res.LinkName, r.Type)
	}
	return fmt.Sprintf("table %s dev %s via %v", kernel.TableString(res.Table), res.LinkName, res.Gw)
}

// TestModelMatchesKernel runs podSequence on the model and on the real
// kernel and compares, at every stage, the normalised dumps of both
// namespaces and the answers to the lookups.
func TestModelMatchesKernel(t *testing.T) {
	ws := both(t)
	var dumps [2][]string
	for i, w := range ws {
		podSequence(t, w, func(stage string) {
			settle(t, w)
			for _, h := range []kernel.API{w.node, w.pod} {
				st, err := kernel.Snapshot(h)
				must(t, err)
				dumps[i] = append(dumps[i], "== "+stage)
				dumps[i] = append(dumps[i], st.Lines()...)
			}
			for _, name := range []string{"eth0", "eth1", "enihost"} {
				dumps[i] = append(dumps[i], "main's routes by "+name+": "+linkRoutes(t, w.node, name))
			}
			for _, q := range lookups {
				dumps[i] = append(dumps[i], fmt.Sprintf("get %v from %v iif %q fibmatch %v: %s", q.Dst, q.Src, q.IifName, q.FIBMatch, answer(w.node, q)))
			}
		})
	}
	if a, b := strings.Join(dumps[0], "\n"), strings.Join(dumps[1], "\n"); a != b {
		t.Fatalf("model and kernel differ\n%s", lineDiff(a, b))
	}
	t.Logf("compared %d lines (dumps and lookups at 4 stages):\n%s", len(dumps[0]), strings.Join(dumps[0], "\n"))
}

// TestRouteGetByRulePriority on the real kernel: a `to X lookup main`
// rule at 512 beats `from Y lookup 2` at 1536, in both families, and the
// model says the same, naming the rule.
func TestRouteGetByRulePriority(t *testing.T) {
	ws := both(t)
	for _, w := range ws {
		podSequence(t, w, func(stage string) {
			if stage != "pod up" && stage != "stale rules" {
				return
			}
			settle(t, w)
			want := map[string]string{"pod up": "eth1", "stale rules": "eth0"}[stage]
			for _, q := range lookups[2:4] {
				res, err := w.node.RouteGet(q)
				must(t, err)
				if res.LinkName != want {
					t.Errorf("%s, %s: %v leaves by %s, want %s", w.name, stage, q.Dst, res.LinkName, want)
				}
				if w.name == "model" {
					if prio := map[string]int{"pod up": 1536, "stale rules": 512}[stage]; res.RulePrio != prio {
						t.Errorf("model, %s: rule %d, want %d", stage, res.RulePrio, prio)
					}
				} else if res.RulePrio != -1 {
					t.Errorf("linux reports rule %d; the kernel does not say", res.RulePrio)
				}
			}
		})
	}
}

// TestRouteListLinkIsFilteredByTheKernel: strictly checked, the kernel
// answers RouteListLink's dump with the routes of that link alone (what
// saves a DEL parsing every pod's host route); unchecked, it sends the
// whole table, which is what the test would see if the filtering were
// netlink's.
func TestRouteListLinkIsFilteredByTheKernel(t *testing.T) {
	w := both(t)[0]
	h := w.node.(*Handle)
	for i, e := range []string{"eth0", "eth1"} {
		idx := w.idx(t, h, e)
		must(t, h.AddrAdd(idx, &net.IPNet{IP: ip(fmt.Sprintf("10.0.%d.10", i+1)), Mask: net.CIDRMask(24, 32)}))
		for j := 11; j < 14; j++ {
			must(t, h.RouteAdd(kernel.Route{Dst: &net.IPNet{IP: ip(fmt.Sprintf("10.0.%d.%d", i+1, j)), Mask: net.CIDRMask(32, 32)},
				LinkIndex: idx, Scope: kernel.ScopeLink}))
		}
	}
	eth0 := w.idx(t, h, "eth0")
	h.mu.Lock()
	strict, err := h.linkDump(kernel.FamilyV4, kernel.TableMain, eth0, true)
	all, err2 := h.linkDump(kernel.FamilyV4, kernel.TableMain, eth0, false)
	h.mu.Unlock()
	must(t, err)
	must(t, err2)
	if len(strict) != 4 { // the subnet's route and three host routes
		t.Errorf("strictly checked: %d routes, want eth0's 4: %v", len(strict), strict)
	}
	for _, r := range strict {
		if r.LinkIndex != eth0 {
			t.Errorf("strictly checked, the kernel sent a route of link %d: %v", r.LinkIndex, r)
		}
	}
	if len(all) != 8 {
		t.Errorf("unchecked: %d routes, want the table's 8", len(all))
	}
	got, err := h.RouteListLink(kernel.FamilyV4, kernel.TableMain, eth0)
	must(t, err)
	if len(got) != 4 {
		t.Errorf("RouteListLink: %v", got)
	}
}
