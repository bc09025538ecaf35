package model

import (
	"fmt"
	"net"
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
func (n *netns) tableLookup(table int, fam kernel.Family, fl flow) (kernel.Route, bool) {
	var best kernel.Route
	bestLen, found := -1, false
	for _, r := range n.routes {
		if r.Table != table || r.Family != fam || r.Scope < fl.minScope || (fl.oif != 0 && r.LinkIndex != fl.oif) {
			continue
		}
		plen := 0
		if r.Dst != nil {
			if !r.Dst.Contains(fl.dst) {
				continue
			}
			plen = prefixLen(r.Dst)
		}
		if plen > bestLen || (plen == bestLen && r.Priority < best.Priority) {
			best, bestLen, found = r, plen, true
		}
	}
	return best, found
}

// policyLookup walks the family's rules in priority order; the first
// matching rule whose table has a route for the flow decides. A rule
// whose table has none lets the walk go on, as in Linux.
func (n *netns) policyLookup(fam kernel.Family, fl flow) (kernel.Route, int, bool) {
	for _, r := range n.rules {
		if !n.ruleMatches(r, fam, fl) {
			continue
		}
		if rt, ok := n.tableLookup(r.Table, fam, fl); ok {
			return rt, r.Priority, true
		}
	}
	return kernel.Route{}, 0, false
}

// RouteGet answers "where does this packet go", as `ip route get` does.
//
// Without IifName it is a locally generated packet (input interface lo,
// so "iif lo" rules match it and other iif rules do not). An IPv4 source
// must then be an address of the namespace (ENETUNREACH otherwise, as
// Linux answers); an IPv6 one may be anything.
//
// With IifName it is a packet arriving on that link (ENODEV if there is
// none). For IPv4 Linux's input checks apply: a missing, multicast or
// loopback source is a martian (EINVAL), so is a source that is a local
// address unless accept_local; when the link does not forward
// (conf/<if>/forwarding, set for all links by ip_forward) a packet that is
// not for the namespace itself is EHOSTUNREACH. IPv6 input lookups have no
// such checks.
//
// A destination that is an address of the namespace resolves through the
// local table to local delivery: LinkIndex/LinkName are lo's and Table is
// 255, as the real kernel reports for a namespace's own addresses. No
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
		fl := flow{dst: dst, src: src, iif: loIndex}
		var iif *link
		if q.IifName != "" {
			if iif = n.byName(q.IifName); iif == nil {
				return noLink(q.IifName)
			}
			fl.iif = iif.Index
		}
		v4 := fam == kernel.FamilyV4
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
			if !n.hasLocal(src) {
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
		localSrc := v4 && iif != nil && n.hasLocal(src) && !n.confOr(fam, iif.Name, "accept_local")
		if rt.Type == kernel.RouteTypeLocal {
			if localSrc {
				return fmt.Errorf("martian source %s on %s: %w", src, iif.Name, syscall.EINVAL)
			}
			res = kernel.RouteResult{Table: rt.Table, LinkIndex: loIndex, LinkName: n.links[loIndex].Name, RulePrio: prio}
			return nil
		}
		if !forwards {
			return fmt.Errorf("%s does not forward: %w", iif.Name, syscall.EHOSTUNREACH)
		}
		if localSrc {
			return fmt.Errorf("martian source %s on %s: %w", src, iif.Name, syscall.EINVAL)
		}
		res = kernel.RouteResult{Table: rt.Table, LinkIndex: rt.LinkIndex, Gw: cloneIP(rt.Gw), RulePrio: prio}
		if l, ok := n.links[rt.LinkIndex]; ok {
			res.LinkName = l.Name
		}
		return nil
	})
	return res, err
}
