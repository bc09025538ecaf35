package model

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// loIndex is LOOPBACK_IFINDEX: lo is the first link of every namespace.
// Locally generated lookups carry it as their input interface, so an
// "iif lo" rule matches them, as in Linux.
const loIndex = 1

// flow is what a lookup matches rules and routes against.
type flow struct {
	dst, src net.IP // src nil: the unspecified address
	iif, oif int    // link indexes; oif 0: any
	// prefer: among routes of one prefix and metric, the one on this
	// link wins (IPv6 scores the device; 0: none preferred).
	prefer   int
	minScope kernel.Scope
}

// ruleMatches is fib_rule_match for the selectors the model has. A rule
// naming an interface that does not exist matches nothing; a mark rule
// matches only packets with that mark, and lookups here carry none.
func (n *netns) ruleMatches(r kernel.Rule, fam kernel.Family, fl flow) bool {
	if r.Family != fam {
		return false
	}
	src := fl.src
	if src == nil {
		src = net.IPv4zero
		if fam == kernel.FamilyV6 {
			src = net.IPv6zero
		}
	}
	if (r.Src != nil && !r.Src.Contains(src)) || (r.Dst != nil && !r.Dst.Contains(fl.dst)) {
		return false
	}
	if r.IifName != "" {
		if l := n.byName(r.IifName); l == nil || l.Index != fl.iif {
			return false
		}
	}
	if r.OifName != "" {
		if l := n.byName(r.OifName); l == nil || l.Index != fl.oif {
			return false
		}
	}
	return r.Mark&r.Mask == 0
}

// tableLookup returns the route of a table for the flow: longest prefix,
// then lowest metric, then the oldest. Routes narrower in scope than the
// flow asks (IPv4 nexthop checks) or on another device than its oif are
// passed over.
func (n *netns) tableLookup(table int, fam kernel.Family, fl flow) (route, bool) {
	return n.lookupIn([]int{table}, fam, fl)
}

// lookupIn is tableLookup over several tables taken as one, as Linux
// keeps local and main while no IPv4 rule has changed: on a tie of
// prefix length the route of the higher table id comes first (a prefix's
// entries are ordered by table before metric), so local before main.
//
// The order the routes are visited in decides only between routes of one
// table (the older wins a tie), so a RouteGet reading the index visits
// the tables one after the other, each in the namespace's order.
func (n *netns) lookupIn(tables []int, fam kernel.Family, fl flow) (route, bool) {
	var best route
	bestLen, found := -1, false
	visit := func(r route) {
		if r.Family != fam || r.Scope < fl.minScope || (fl.oif != 0 && r.LinkIndex != fl.oif) {
			return
		}
		plen := 0
		if r.Dst != nil {
			if !r.Dst.Contains(fl.dst) {
				return
			}
			plen = prefixLen(r.Dst)
		}
		if plen > bestLen || (plen == bestLen && better(r, best, fl)) {
			best, bestLen, found = r, plen, true
		}
	}
	if n.cur != nil {
		for _, t := range tables {
			for _, i := range n.cur.byTable[t] {
				visit(n.routes[i])
			}
		}
		return best, found
	}
	for _, r := range n.routes {
		if slices.Contains(tables, r.Table) {
			visit(r)
		}
	}
	return best, found
}

// better orders two routes of the same prefix length: the higher table
// first (local before main when they are merged), then the lower metric,
// then the one on the preferred link, then the older (r is the newer).
func better(r, best route, fl flow) bool {
	switch {
	case r.Table != best.Table:
		return r.Table > best.Table
	case r.Priority != best.Priority:
		return r.Priority < best.Priority
	}
	return fl.prefer != 0 && r.LinkIndex == fl.prefer && best.LinkIndex != fl.prefer
}

// policyLookup walks the family's rules in priority order; the first
// matching rule whose table has a route for the flow decides. A rule
// whose table has none lets the walk go on, as in Linux.
//
// Until the rules are customised Linux takes a fast path that ignores
// them, and so does the model: for IPv4, until a rule is added or deleted
// (v4CustomRules), main with local merged in, then default; for IPv6,
// until a rule is added (v6CustomRules: deleting one does not count),
// local then main, even if "0: lookup local" was deleted. The priorities
// returned are those of the default rules the fast path stands for.
func (n *netns) policyLookup(fam kernel.Family, fl flow) (route, int, bool) {
	switch {
	case fam == kernel.FamilyV4 && !n.v4CustomRules:
		if rt, ok := n.lookupIn(mainAndLocal, fam, fl); ok {
			if rt.Table == kernel.TableLocal {
				return rt, 0, true
			}
			return rt, 32766, true
		}
		if rt, ok := n.tableLookup(kernel.TableDefault, fam, fl); ok {
			return rt, 32767, true
		}
		return route{}, 0, false
	case fam == kernel.FamilyV6 && !n.v6CustomRules:
		for _, r := range []struct{ table, prio int }{{kernel.TableLocal, 0}, {kernel.TableMain, 32766}} {
			if rt, ok := n.tableLookup(r.table, fam, fl); ok {
				return rt, r.prio, true
			}
		}
		return route{}, 0, false
	}
	var src, dst netip.Addr
	if n.cur != nil {
		src, dst = addrOf(fl.src, fam == kernel.FamilyV4), addrOf(fl.dst, fam == kernel.FamilyV4)
	}
	for i, r := range n.rules {
		if n.cur != nil && n.cur.rules[i].fast {
			if !n.ruleMatchesAt(r, n.cur.rules[i], fam, fl, src, dst) {
				continue
			}
		} else if !n.ruleMatches(r, fam, fl) {
			continue
		}
		if rt, ok := n.tableLookup(r.Table, fam, fl); ok {
			return rt, r.Priority, true
		}
	}
	return route{}, 0, false
}

// mainAndLocal are the tables IPv4 keeps merged until a rule changes.
var mainAndLocal = []int{kernel.TableMain, kernel.TableLocal}

// ruleMatchesAt is ruleMatches with the rule's address selectors read as
// prefixes from the index (src and dst the flow's, the unspecified
// address for none).
func (n *netns) ruleMatchesAt(r kernel.Rule, sel ruleSel, fam kernel.Family, fl flow, src, dst netip.Addr) bool {
	if r.Family != fam {
		return false
	}
	if (sel.src.IsValid() && !sel.src.Contains(src)) || (sel.dst.IsValid() && !sel.dst.Contains(dst)) {
		return false
	}
	r.Src, r.Dst = nil, nil // (checked)
	return n.ruleMatches(r, fam, fl)
}

// reportedTable is the table RouteGet reports for a route: its own,
// except that an IPv4 local-table route is reported as main while the
// namespace has had no IPv4 rule added or deleted. Linux then keeps the
// local table merged into main (one trie, fib_unmerge splits it at the
// first rule change) and says the answer came from main.
func (n *netns) reportedTable(rt route) int {
	if rt.Family == kernel.FamilyV4 && rt.Table == kernel.TableLocal && !n.v4CustomRules {
		return kernel.TableMain
	}
	return rt.Table
}

// localAddr4 is __ip_dev_find's test of an IPv4 source: an address of a
// link, or one the local table routes as local (an address in the subnet
// of an address on lo, which is all local).
func (n *netns) localAddr4(ip net.IP) bool {
	if n.hasLocal(ip) {
		return true
	}
	rt, ok := n.tableLookup(kernel.TableLocal, kernel.FamilyV4, flow{dst: ip})
	return ok && rt.Type == kernel.RouteTypeLocal
}

// martianSource is fib_validate_source with rp_filter off, for a packet
// from src to dst arriving on iif whose route leaves by oif (0: it is
// delivered locally): a source that is local is refused, unless
// accept_local. While the rules are the default ones and the packet does
// not leave by the link it came in on (where redirects are sent), local
// means an address of a link; otherwise Linux looks the source up through
// the rules, as a destination from oif, and local means a local route.
func (n *netns) martianSource(src, dst net.IP, iif *link, oif int) bool {
	if n.confOr(kernel.FamilyV4, iif.Name, "accept_local") {
		return false
	}
	if !n.v4CustomRules && (iif.Index != oif || !n.confOr(kernel.FamilyV4, iif.Name, "send_redirects")) {
		return n.hasLocal(src)
	}
	back := oif
	if back == 0 {
		back = loIndex
	}
	rt, _, ok := n.policyLookup(kernel.FamilyV4, flow{dst: src, src: dst, iif: back})
	return ok && rt.Type == kernel.RouteTypeLocal
}

// RouteGet answers "where does this packet go", as `ip route get` does.
//
// Without IifName it is a locally generated packet (input interface lo,
// so "iif lo" rules match it and other iif rules do not). An IPv4 source
// must then be local (see localAddr4; ENETUNREACH otherwise, as Linux
// answers); an IPv6 one may be anything.
//
// With IifName it is a packet arriving on that link (ENODEV if there is
// none). For IPv4 Linux's input checks apply: a missing, multicast or
// loopback source is a martian (EINVAL), so is a source that is local
// (see martianSource); when the link does not forward
// (conf/<if>/forwarding, set for all links by ip_forward) a packet that is
// not for the namespace itself is EHOSTUNREACH. IPv6 input lookups have no
// such checks.
//
// A destination that is an address of the namespace resolves through the
// local table to local delivery: LinkIndex/LinkName are lo's and Table is
// 255 (254 for IPv4 until a rule changes, see reportedTable), as the real
// kernel reports for a namespace's own addresses. No
// route is ENETUNREACH. RulePrio is the priority of the rule whose table
// answered.
func (h *handle) RouteGet(q kernel.RouteQuery) (res kernel.RouteResult, err error) {
	if q.Dst == nil {
		return res, fmt.Errorf("route get without destination: %w", syscall.EINVAL)
	}
	dst, src := cloneIP(q.Dst), cloneIP(q.Src)
	if isUnspecified(src) {
		src = nil
	}
	fam := kernel.FamilyOf(dst)
	if src != nil && kernel.FamilyOf(src) != fam {
		return res, fmt.Errorf("route get from %s to %s mixes families: %w", src, dst, syscall.EINVAL)
	}
	err = h.with(func(n *netns) error {
		if indexLookups {
			n.cur = n.indexAt(h.k.gen)
			defer func() { n.cur = nil }()
		}
		fl := flow{dst: dst, src: src, iif: loIndex}
		var iif *link
		if q.IifName != "" {
			if iif = n.byName(q.IifName); iif == nil {
				return noLink(q.IifName)
			}
			fl.iif = iif.Index
		}
		v4 := fam == kernel.FamilyV4
		if !v4 && iif != nil {
			fl.prefer = iif.Index // ip6_pol_route_input scores the input device as its oif
		}
		switch {
		case v4 && iif != nil:
			if src == nil || src.IsMulticast() || src.Equal(net.IPv4bcast) ||
				((src.IsLoopback() || dst.IsLoopback()) && !n.confOr(fam, iif.Name, "route_localnet")) {
				return fmt.Errorf("martian packet from %v on %s: %w", src, iif.Name, syscall.EINVAL)
			}
		case v4 && src != nil:
			if src.IsMulticast() {
				return fmt.Errorf("source %s: %w", src, syscall.EINVAL)
			}
			if !n.localAddr4(src) {
				return fmt.Errorf("source %s is not local: %w", src, syscall.ENETUNREACH)
			}
		}
		forwards := iif == nil || !v4 || n.intConf(fam, iif.Name, "forwarding") != 0
		rt, prio, ok := n.policyLookup(fam, fl)
		if !ok {
			if !forwards {
				return fmt.Errorf("no route to %s, and %s does not forward: %w", dst, iif.Name, syscall.EHOSTUNREACH)
			}
			return fmt.Errorf("no route to %s: %w", dst, syscall.ENETUNREACH)
		}
		if rt.Type == kernel.RouteTypeLocal {
			if v4 && iif != nil && n.martianSource(src, dst, iif, 0) {
				return fmt.Errorf("martian source %s on %s: %w", src, iif.Name, syscall.EINVAL)
			}
			res = kernel.RouteResult{Table: n.reportedTable(rt), LinkIndex: loIndex, LinkName: n.links[loIndex].Name, RulePrio: prio}
			if q.FIBMatch {
				res.Route = copyRoute(rt.Route)
			}
			return nil
		}
		if !forwards {
			return fmt.Errorf("%s does not forward: %w", iif.Name, syscall.EHOSTUNREACH)
		}
		if v4 && iif != nil && n.martianSource(src, dst, iif, rt.LinkIndex) {
			return fmt.Errorf("martian source %s on %s: %w", src, iif.Name, syscall.EINVAL)
		}
		res = kernel.RouteResult{Table: n.reportedTable(rt), LinkIndex: rt.LinkIndex, Gw: cloneIP(rt.Gw), RulePrio: prio}
		if rt.hostGw {
			res.Gw = nil // see route
		}
		if q.FIBMatch {
			res.Route = copyRoute(rt.Route)
		}
		if l, ok := n.links[rt.LinkIndex]; ok {
			res.LinkName = l.Name
		}
		return nil
	})
	return res, err
}
