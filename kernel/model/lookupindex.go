package model

import (
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// lookupIndex is what RouteGet's lookups read instead of walking every
// rule and every route of the namespace: the routes of each table, in the
// namespace's order, and the address selectors of each rule as netip
// prefixes. A node with a hundred pods has hundreds of rules and routes,
// and a fleet's checks ask it where thousands of packets go.
//
// It describes the namespace at one generation of the machine (every
// change moves it first, under the machine's lock) and is built and used
// only by RouteGet, which changes nothing: a lookup made while a change is
// under way (a route add resolving its nexthop) walks the namespace as it
// is.
type lookupIndex struct {
	gen     uint64
	byTable map[int][]int // indexes into netns.routes, in order
	rules   []ruleSel     // parallel to netns.rules
}

// indexLookups turns the index on; tests turn it off to compare.
var indexLookups = true

// ruleSel is a rule's source and destination selectors as prefixes; fast
// is false when one cannot be written as a prefix (a mask that is not a
// prefix length), and the rule is then matched as it is.
type ruleSel struct {
	src, dst netip.Prefix // invalid: any
	fast     bool
}

// indexAt is the namespace's index at generation gen, built if the one it
// has is older.
func (n *netns) indexAt(gen uint64) *lookupIndex {
	if n.idx != nil && n.idx.gen == gen {
		return n.idx
	}
	x := &lookupIndex{gen: gen, byTable: map[int][]int{}, rules: make([]ruleSel, len(n.rules))}
	for i, r := range n.routes {
		x.byTable[r.Table] = append(x.byTable[r.Table], i)
	}
	for i, r := range n.rules {
		src, okSrc := prefixSel(r.Src)
		dst, okDst := prefixSel(r.Dst)
		x.rules[i] = ruleSel{src: src, dst: dst, fast: okSrc && okDst}
	}
	n.idx = x
	return x
}

// prefixSel is a selector as a prefix (the invalid prefix for none), false
// if it cannot be one.
func prefixSel(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, true
	}
	return kernel.Prefix(n)
}

// addrOf is an IP as the family's netip address (nil: unspecified).
func addrOf(ip net.IP, v4 bool) netip.Addr {
	if ip == nil {
		if v4 {
			return netip.IPv4Unspecified()
		}
		return netip.IPv6Unspecified()
	}
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}
