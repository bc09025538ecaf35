package model

import (
	"net"

	"github.com/vpccni/vpccni/kernel"
)

// copier makes the copies a list hands out (RuleList, RouteList) from a
// few large allocations instead of three small ones per address: a node
// with a hundred pods has hundreds of rules and routes, and its readers
// (ipamd's reconciler, the plugin's stale-rule sweep, the checks) list
// them many times a second of simulated time. Every copy is still the
// caller's own: each byte slice is capped at its length, so appending to
// one cannot write into the next.
type copier struct {
	nets  []net.IPNet
	bytes []byte
}

// copierChunk is how many addresses a chunk holds; a chunk is never
// grown in place, so the pointers into it stay valid.
const copierChunk = 256

func (c *copier) ip(ip net.IP) net.IP {
	if ip == nil {
		return nil
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return c.take(ip)
}

// take copies b into the current byte chunk.
func (c *copier) take(b []byte) []byte {
	if cap(c.bytes)-len(c.bytes) < len(b) {
		c.bytes = make([]byte, 0, max(copierChunk*net.IPv6len, len(b)))
	}
	start := len(c.bytes)
	c.bytes = append(c.bytes, b...)
	return c.bytes[start:len(c.bytes):len(c.bytes)]
}

// net is cloneNet from the chunks.
func (c *copier) net(n *net.IPNet) *net.IPNet {
	if n == nil {
		return nil
	}
	ip := c.ip(n.IP)
	mask := n.Mask
	if len(ip) == net.IPv4len && len(mask) == net.IPv6len {
		mask = mask[12:]
	}
	if len(c.nets) == cap(c.nets) {
		c.nets = make([]net.IPNet, 0, copierChunk)
	}
	c.nets = append(c.nets, net.IPNet{IP: ip, Mask: net.IPMask(c.take(mask))})
	return &c.nets[len(c.nets)-1]
}

func (c *copier) rule(r kernel.Rule) kernel.Rule {
	r.Src, r.Dst = c.net(r.Src), c.net(r.Dst)
	return r
}

func (c *copier) route(r kernel.Route) kernel.Route {
	r.Dst, r.Gw, r.Src = c.net(r.Dst), c.ip(r.Gw), c.ip(r.Src)
	return r
}
