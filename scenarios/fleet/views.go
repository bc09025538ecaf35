package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"

	"github.com/vpccni/vpccni/kernel"
)

// A node's route lookup for a destination in the VPC depends on the
// destination only through the prefixes its rules (to) and routes (dst)
// name: two addresses that lie in exactly the same of those prefixes take
// the same path. Most prefixes hold a whole block of the VPC (the block,
// a default route) or none of it; only the narrower ones inside a block
// tell its addresses apart, and on a node those are almost all single
// addresses (a pod's route, a leaked rule 512). So checking where a node
// sends traffic for every address of a 1,000-node cluster is checking it
// for the single addresses it names and for one stand-in per class of
// the rest. A VPC of several blocks has a class (at least) per block: a
// route may cover one block and not another.

// view is what the fleet read of one node's kernel at a generation.
type view struct {
	gen uint64
	// hosts are the single addresses a rule or route of the node names.
	hosts map[netip.Addr]bool
	// standIns are one address per class of the VPC's other addresses
	// (those no prefix narrower than their block tells apart), in order.
	standIns []netip.Addr
}

// readView reads the prefixes of a node's rules and routes inside the
// VPC's blocks.
func readView(k kernel.API, blocks []netip.Prefix, gen uint64) (*view, error) {
	rules, err := k.RuleList(kernel.FamilyV4)
	if err != nil {
		return nil, err
	}
	routes, err := k.RouteList(kernel.FamilyV4, 0)
	if err != nil {
		return nil, err
	}
	v := &view{gen: gen, hosts: map[netip.Addr]bool{}}
	var nets []netip.Prefix
	add := func(n *net.IPNet) {
		p, ok := prefixOf(n)
		if !ok || !insideBlock(p, blocks) {
			return // whole blocks or none of them: each block's addresses alike
		}
		if p.IsSingleIP() {
			v.hosts[p.Addr()] = true
		} else {
			nets = append(nets, p)
		}
	}
	for _, r := range rules {
		add(r.Dst)
	}
	for _, r := range routes {
		add(r.Dst)
	}
	v.standIns = standIns(blocks, nets, v.hosts)
	return v, nil
}

// insideBlock reports whether p lies strictly inside one of the blocks:
// prefixes nest or are disjoint, so one that overlaps a block and is no
// narrower holds all of it.
func insideBlock(p netip.Prefix, blocks []netip.Prefix) bool {
	for _, b := range blocks {
		if b.Overlaps(p) && p.Bits() > b.Bits() {
			return true
		}
	}
	return false
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	p, ok := kernel.Prefix(n)
	return p.Masked(), ok
}

// standInTries bounds the search for a stand-in of one class: a class
// whose top addresses are all named singly is left without one (its
// named addresses are checked one by one anyway).
const standInTries = 1024

// standIns picks one address for each block outside every narrower
// prefix, and one for each narrower prefix outside the prefixes nested in
// it: prefixes nest or are disjoint, so these are the classes of
// addresses the node's lookups cannot tell apart. Each is the class's
// highest address (a network's last but one: the last is its broadcast)
// that no rule or route names singly, the addresses pods are given last.
func standIns(blocks, nets []netip.Prefix, hosts map[netip.Addr]bool) []netip.Addr {
	sort.Slice(nets, func(i, j int) bool {
		if nets[i].Bits() != nets[j].Bits() {
			return nets[i].Bits() < nets[j].Bits()
		}
		return nets[i].Addr().Less(nets[j].Addr())
	})
	var out []netip.Addr
	seen := map[netip.Prefix]bool{}
	for _, p := range append(slices.Clone(blocks), nets...) {
		if seen[p] {
			continue
		}
		seen[p] = true
		a := lastAddr(p).Prev()
		for try := 0; try < standInTries && p.Contains(a); try, a = try+1, a.Prev() {
			if !hosts[a] && !insideNarrower(a, p, nets) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func insideNarrower(a netip.Addr, p netip.Prefix, nets []netip.Prefix) bool {
	for _, q := range nets {
		if q.Bits() > p.Bits() && q.Contains(a) {
			return true
		}
	}
	return false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// standInName names a stand-in in a finding.
func standInName(node string) string {
	return fmt.Sprintf("standing for every VPC address node %s names in no rule or route of its own", node)
}
