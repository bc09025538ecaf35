package kernel

import (
	"net"
	"net/netip"
)

// Prefix reads a selector or destination as a prefix counted on its
// unmapped address, so 10.0.0.0/24 reads the same with a 4- or 16-byte
// mask. It is not masked: a rule keeps the address it was given (host
// bits included), and netip's Contains compares only the prefix's bits,
// as net.IPNet's does. False for nil, or a mask that is not a prefix
// length.
func Prefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	p := netip.PrefixFrom(a, ones-(bits-a.BitLen()))
	return p, p.IsValid()
}
