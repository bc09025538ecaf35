package model

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// RouteGet answers "where does this packet go" as Linux's policy routing
// does: rules of the family in priority order; a rule matches when its
// source contains the packet's source (no source: the unspecified address),
// its destination contains the destination and its iif is the packet's
// input interface (a rule with an iif never matches a locally generated
// packet; an oif rule never matches an input lookup); the first matching
// rule whose table has a route for the destination wins, by longest prefix
// and then lowest metric.
func (h *handle) RouteGet(q kernel.RouteQuery) (res kernel.RouteResult, err error) {
	if q.Dst == nil {
		return res, fmt.Errorf("route get without destination: %w", syscall.EINVAL)
	}
	fam := kernel.FamilyOf(q.Dst)
	src := q.Src
	if src == nil {
		src = net.IPv4zero
		if fam == kernel.FamilyV6 {
			src = net.IPv6zero
		}
	}
	err = h.with(func(n *netns) error {
		for _, r := range n.rules {
			if r.Family != fam || (r.Src != nil && !r.Src.Contains(src)) || (r.Dst != nil && !r.Dst.Contains(q.Dst)) {
				continue
			}
			if (r.IifName != "" && r.IifName != q.IifName) || (r.OifName != "" && q.IifName != "") || r.Mark != 0 {
				continue
			}
			if best, ok := n.lookup(r.Table, fam, q.Dst); ok {
				res = kernel.RouteResult{Table: best.Table, LinkIndex: best.LinkIndex, Gw: best.Gw, RulePrio: r.Priority}
				if l, ok := n.links[best.LinkIndex]; ok {
					res.LinkName = l.Name
				}
				return nil
			}
		}
		return fmt.Errorf("no route to %s: %w", q.Dst, syscall.ENETUNREACH)
	})
	return res, err
}

func (n *netns) lookup(table int, fam kernel.Family, dst net.IP) (kernel.Route, bool) {
	var best kernel.Route
	bestLen, found := -1, false
	for _, r := range n.routes {
		if r.Table != table || r.Family != fam {
			continue
		}
		plen := 0
		if r.Dst != nil {
			if !r.Dst.Contains(dst) {
				continue
			}
			plen, _ = r.Dst.Mask.Size()
		}
		if plen > bestLen || (plen == bestLen && r.Priority < best.Priority) {
			best, bestLen, found = r, plen, true
		}
	}
	return best, found
}
