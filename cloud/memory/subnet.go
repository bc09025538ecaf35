package memory

import (
	"fmt"
	"net/netip"
	"slices"
)

// subnet is a VPC subnet with EC2's address accounting: every address an
// ENI holds (its primary, its secondaries, each address of a delegated
// /28) is taken from it, and AWS keeps five of them for itself (the base,
// +1 router, +2 DNS, +3 reserved, and the broadcast address).
type subnet struct {
	id   string
	cidr netip.Prefix
	// ipv6 is the subnet's /64; IPv6 prefix delegation takes /80s from it.
	ipv6 netip.Prefix
	// used and usedV6 say which ENI holds each taken address and /80, so
	// VPC.Holder answers without scanning the ENIs.
	used   map[netip.Addr]*eni
	usedV6 map[netip.Prefix]*eni
	// Search hints: no free address lies below offset next, no wholly
	// free /28 below offset nextPrefix, no free /80 below index nextV6.
	// Taking moves them up, giving back moves them down, so the lowest
	// free one is still found first without rescanning a busy subnet's
	// taken start on every call (quadratic with a fleet's 100k addresses).
	next, nextPrefix, nextV6 int
}

func newSubnet(cidr netip.Prefix) *subnet {
	b := cidr.Addr().As4()
	v6 := netip.MustParsePrefix(fmt.Sprintf("2600:1f14:a:%x::/64", b[2]))
	return &subnet{id: "subnet-" + hexID(cidr.String()), cidr: cidr, ipv6: v6,
		used: map[netip.Addr]*eni{}, usedV6: map[netip.Prefix]*eni{}}
}

// size is the number of addresses in the CIDR.
func (s *subnet) size() int { return 1 << (32 - s.cidr.Bits()) }

// offset is a's position in the subnet (0 is the base).
func (s *subnet) offset(a netip.Addr) int { return int(toUint32(a) - toUint32(s.cidr.Addr())) }

// at is the address at offset i.
func (s *subnet) at(i int) netip.Addr { return fromUint32(toUint32(s.cidr.Addr()) + uint32(i)) }

func toUint32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromUint32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (s *subnet) reserved(i int) bool { return i <= 3 || i == s.size()-1 }

// available is what DescribeSubnets reports as AvailableIpAddressCount.
func (s *subnet) available() int { return s.size() - 5 - len(s.used) }

// free reports whether the address is in the subnet and can be taken.
func (s *subnet) free(a netip.Addr) bool {
	return s.cidr.Contains(a) && !s.reserved(s.offset(a)) && s.used[a] == nil
}

// takeAddrs takes the n lowest free addresses for owner, or none if
// fewer are free.
func (s *subnet) takeAddrs(n int, owner *eni) ([]netip.Addr, bool) {
	var out []netip.Addr
	i := s.next
	for ; i < s.size() && len(out) < n; i++ {
		if a := s.at(i); !s.reserved(i) && s.used[a] == nil {
			out = append(out, a)
		}
	}
	if len(out) < n {
		// Everything below the first free address found is taken.
		s.next = i
		if len(out) > 0 {
			s.next = s.offset(out[0])
		}
		return nil, false
	}
	for _, a := range out {
		s.used[a] = owner
	}
	s.next = i
	return out, true
}

// prefixFree reports whether every address of the /28 can be taken.
func (s *subnet) prefixFree(p netip.Prefix) bool {
	if p.Bits() != 28 || p != p.Masked() || !s.cidr.Contains(p.Addr()) || s.cidr.Bits() > 28 {
		return false
	}
	for i, first := 0, s.offset(p.Addr()); i < 16; i++ {
		if s.reserved(first+i) || s.used[s.at(first+i)] != nil {
			return false
		}
	}
	return true
}

// takePrefixes takes the n lowest /28 blocks that are wholly free for
// owner. The first and last /28 of a subnet hold reserved addresses, so
// they are never delegated.
func (s *subnet) takePrefixes(n int, owner *eni) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	i := s.nextPrefix
	for ; i+16 <= s.size() && len(out) < n; i += 16 {
		if p := netip.PrefixFrom(s.at(i), 28); s.prefixFree(p) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		s.nextPrefix = i
		if len(out) > 0 {
			s.nextPrefix = s.offset(out[0].Addr())
		}
		return nil, false
	}
	for _, p := range out {
		s.markPrefix(p, owner)
	}
	s.nextPrefix = i
	return out, true
}

// markPrefix gives every address of the /28 to owner, or back to the
// subnet if owner is nil.
func (s *subnet) markPrefix(p netip.Prefix, owner *eni) {
	first := s.offset(p.Addr())
	for i := range 16 {
		if owner != nil {
			s.used[s.at(first+i)] = owner
		} else {
			delete(s.used, s.at(first+i))
		}
	}
	if owner == nil {
		s.freed(first)
	}
}

// release gives addresses back.
func (s *subnet) release(addrs ...netip.Addr) {
	for _, a := range addrs {
		delete(s.used, a)
		s.freed(s.offset(a))
	}
}

// freed lowers the search hints below an address given back at offset i:
// it is free, and its /28 may now be wholly free.
func (s *subnet) freed(i int) {
	s.next = min(s.next, i)
	s.nextPrefix = min(s.nextPrefix, i&^15)
}

// v6At is the i-th /80 of the subnet's /64.
func (s *subnet) v6At(i int) netip.Prefix {
	b := s.ipv6.Addr().As16()
	b[8], b[9] = byte(i>>8), byte(i)
	return netip.PrefixFrom(netip.AddrFrom16(b), 80)
}

// takeV6Prefixes takes the n lowest free /80s for owner.
func (s *subnet) takeV6Prefixes(n int, owner *eni) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	i := s.nextV6
	for ; i < 1<<16 && len(out) < n; i++ {
		if p := s.v6At(i); s.usedV6[p] == nil {
			out = append(out, p)
		}
	}
	if len(out) < n {
		s.nextV6 = i
		if len(out) > 0 {
			s.nextV6 = s.v6Index(out[0])
		}
		return nil, false
	}
	for _, p := range out {
		s.usedV6[p] = owner
	}
	s.nextV6 = i
	return out, true
}

// v6Index is the position of a /80 of the subnet's /64 (v6At's inverse).
func (s *subnet) v6Index(p netip.Prefix) int {
	b := p.Addr().As16()
	return int(b[8])<<8 | int(b[9])
}

// releaseV6 gives a /80 back.
func (s *subnet) releaseV6(p netip.Prefix) {
	delete(s.usedV6, p)
	s.nextV6 = min(s.nextV6, s.v6Index(p))
}

// v6Free reports whether a /80 of the subnet's /64 can be taken.
func (s *subnet) v6Free(p netip.Prefix) bool {
	return p.Bits() == 80 && p == p.Masked() && s.ipv6.Contains(p.Addr()) && s.usedV6[p] == nil
}

func sortAddrs(a []netip.Addr)      { slices.SortFunc(a, netip.Addr.Compare) }
func sortPrefixes(p []netip.Prefix) { slices.SortFunc(p, comparePrefix) }

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
