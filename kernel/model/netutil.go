package model

import (
	"net"

	"github.com/vpccni/vpccni/kernel"
)

// The model keeps addresses in the kernel package's net types. These
// helpers normalise them (IPv4 always in 4-byte form, so Equal and map keys
// agree) and copy them, so a caller mutating what it passed in or got back
// cannot reach into the model's state.

func cloneIP(ip net.IP) net.IP {
	if ip == nil {
		return nil
	}
	if v4 := ip.To4(); v4 != nil {
		return append(net.IP(nil), v4...)
	}
	return append(net.IP(nil), ip...)
}

func cloneNet(n *net.IPNet) *net.IPNet {
	if n == nil {
		return nil
	}
	ip := cloneIP(n.IP)
	mask := append(net.IPMask(nil), n.Mask...)
	if len(ip) == net.IPv4len && len(mask) == net.IPv6len {
		mask = mask[12:]
	}
	return &net.IPNet{IP: ip, Mask: mask}
}

func cloneMAC(m net.HardwareAddr) net.HardwareAddr {
	if m == nil {
		return nil
	}
	return append(net.HardwareAddr(nil), m...)
}

func familyOfNet(n *net.IPNet) kernel.Family { return kernel.FamilyOf(n.IP) }

func prefixLen(n *net.IPNet) int {
	if n == nil {
		return 0
	}
	ones, _ := n.Mask.Size()
	return ones
}

// sameNet compares address and mask exactly (host bits included): rules
// keep the address they were given, as the kernel does.
func sameNet(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return prefixLen(a) == prefixLen(b) && len(a.Mask) == len(b.Mask) && a.IP.Equal(b.IP)
}

func hostNet(ip net.IP) *net.IPNet {
	ip = cloneIP(ip)
	bits := len(ip) * 8
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}
}

// masked is the network of a prefix (host bits cleared).
func masked(n *net.IPNet) *net.IPNet {
	c := cloneNet(n)
	c.IP = c.IP.Mask(c.Mask)
	return c
}

func hasHostBits(n *net.IPNet) bool { return !n.IP.Equal(n.IP.Mask(n.Mask)) }

// defaultNet turns an explicit /0 into nil, the model's spelling of "the
// default route" or "from all".
func defaultNet(n *net.IPNet) *net.IPNet {
	if n == nil || n.IP == nil || prefixLen(n) == 0 {
		return nil
	}
	return cloneNet(n)
}

func ipEqual(a, b net.IP) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}

func isUnspecified(ip net.IP) bool { return ip == nil || ip.IsUnspecified() }

func copyRoute(r kernel.Route) kernel.Route {
	r.Dst, r.Gw, r.Src = cloneNet(r.Dst), cloneIP(r.Gw), cloneIP(r.Src)
	return r
}

func copyRule(r kernel.Rule) kernel.Rule {
	r.Src, r.Dst = cloneNet(r.Src), cloneNet(r.Dst)
	return r
}

func copyAddr(a kernel.Addr) kernel.Addr {
	a.IPNet = cloneNet(a.IPNet)
	return a
}

func copyNeigh(nb kernel.Neigh) kernel.Neigh {
	nb.IP, nb.HardwareAddr = cloneIP(nb.IP), cloneMAC(nb.HardwareAddr)
	return nb
}

func copyLink(l kernel.Link) kernel.Link {
	l.HardwareAddr = cloneMAC(l.HardwareAddr)
	return l
}

func filter[T any](xs []T, keep func(T) bool) []T {
	out := xs[:0]
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	var zero T
	for i := len(out); i < len(xs); i++ {
		xs[i] = zero // drop references held by the tail
	}
	return out
}
