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
	ipv6   netip.Prefix
	used   map[netip.Addr]bool
	usedV6 map[netip.Prefix]bool
}

func newSubnet(cidr netip.Prefix) *subnet {
	b := cidr.Addr().As4()
	v6 := netip.MustParsePrefix(fmt.Sprintf("2600:1f14:a:%x::/64", b[2]))
	return &subnet{id: "subnet-" + hexID(cidr.String()), cidr: cidr, ipv6: v6,
		used: map[netip.Addr]bool{}, usedV6: map[netip.Prefix]bool{}}
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
	return s.cidr.Contains(a) && !s.reserved(s.offset(a)) && !s.used[a]
}

// takeAddrs takes the n lowest free addresses, or none if fewer are free.
func (s *subnet) takeAddrs(n int) ([]netip.Addr, bool) {
	var out []netip.Addr
	for i := 0; i < s.size() && len(out) < n; i++ {
		if a := s.at(i); !s.reserved(i) && !s.used[a] {
			out = append(out, a)
		}
	}
	if len(out) < n {
		return nil, false
	}
	for _, a := range out {
		s.used[a] = true
	}
	return out, true
}

// prefixFree reports whether every address of the /28 can be taken.
func (s *subnet) prefixFree(p netip.Prefix) bool {
	if p.Bits() != 28 || p != p.Masked() || !s.cidr.Contains(p.Addr()) || s.cidr.Bits() > 28 {
		return false
	}
	for i, first := 0, s.offset(p.Addr()); i < 16; i++ {
		if s.reserved(first+i) || s.used[s.at(first+i)] {
			return false
		}
	}
	return true
}

// takePrefixes takes the n lowest /28 blocks that are wholly free. The
// first and last /28 of a subnet hold reserved addresses, so they are
// never delegated.
func (s *subnet) takePrefixes(n int) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	for i := 0; i+16 <= s.size() && len(out) < n; i += 16 {
		if p := netip.PrefixFrom(s.at(i), 28); s.prefixFree(p) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, false
	}
	for _, p := range out {
		s.markPrefix(p, true)
	}
	return out, true
}

func (s *subnet) markPrefix(p netip.Prefix, used bool) {
	for i, first := 0, s.offset(p.Addr()); i < 16; i++ {
		if used {
			s.used[s.at(first+i)] = true
		} else {
			delete(s.used, s.at(first+i))
		}
	}
}

func (s *subnet) release(addrs ...netip.Addr) {
	for _, a := range addrs {
		delete(s.used, a)
	}
}

// v6At is the i-th /80 of the subnet's /64.
func (s *subnet) v6At(i int) netip.Prefix {
	b := s.ipv6.Addr().As16()
	b[8], b[9] = byte(i>>8), byte(i)
	return netip.PrefixFrom(netip.AddrFrom16(b), 80)
}

// takeV6Prefixes takes the n lowest free /80s.
func (s *subnet) takeV6Prefixes(n int) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	for i := 0; i < 1<<16 && len(out) < n; i++ {
		if p := s.v6At(i); !s.usedV6[p] {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, false
	}
	for _, p := range out {
		s.usedV6[p] = true
	}
	return out, true
}

// v6Free reports whether a /80 of the subnet's /64 can be taken.
func (s *subnet) v6Free(p netip.Prefix) bool {
	return p.Bits() == 80 && p == p.Masked() && s.ipv6.Contains(p.Addr()) && !s.usedV6[p]
}

func sortAddrs(a []netip.Addr)      { slices.SortFunc(a, netip.Addr.Compare) }
func sortPrefixes(p []netip.Prefix) { slices.SortFunc(p, comparePrefix) }

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
