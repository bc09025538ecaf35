package model

import (
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

func sameNet(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ao, ab := a.Mask.Size()
	bo, bb := b.Mask.Size()
	return ao == bo && ab == bb && a.IP.Equal(b.IP)
}

func familyOfNet(n *net.IPNet) kernel.Family { return kernel.FamilyOf(n.IP) }

func hostNet(ip net.IP) *net.IPNet {
	bits := 128
	if ip.To4() != nil {
		ip, bits = ip.To4(), 32
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}
}

func masked(n *net.IPNet) *net.IPNet {
	ip := n.IP
	if ip.To4() != nil {
		ip = ip.To4()
	}
	return &net.IPNet{IP: ip.Mask(n.Mask), Mask: n.Mask}
}

// addAddr adds an address with its local-table route (and prefix route
// when the link is up).
func (n *netns) addAddr(l *link, ipn *net.IPNet) {
	a := kernel.Addr{LinkIndex: l.Index, IPNet: &net.IPNet{IP: ipn.IP, Mask: ipn.Mask}, Flags: kernel.AddrFlagPermanent}
	if ipn.IP.IsLoopback() {
		a.Scope = kernel.ScopeHost
	}
	n.addrs = append(n.addrs, a)
	n.routes = append(n.routes, kernel.Route{Table: kernel.TableLocal, Dst: hostNet(ipn.IP), LinkIndex: l.Index,
		Scope: kernel.ScopeHost, Src: ipn.IP, Family: familyOfNet(ipn), Type: kernel.RouteTypeLocal, Protocol: 2})
	if l.Up {
		n.addPrefixRoute(l, a.IPNet)
	}
}

// addPrefixRoute adds the connected route of an address whose prefix is
// shorter than a host route (proto kernel, scope link), unless present.
func (n *netns) addPrefixRoute(l *link, ipn *net.IPNet) {
	ones, bits := ipn.Mask.Size()
	if ones == bits || ipn.IP.IsLoopback() {
		return
	}
	r := kernel.Route{Table: kernel.TableMain, Dst: masked(ipn), LinkIndex: l.Index, Scope: kernel.ScopeLink,
		Src: ipn.IP, Family: familyOfNet(ipn), Type: kernel.RouteTypeUnicast, Protocol: 2}
	if familyOfNet(ipn) == kernel.FamilyV6 {
		r.Src, r.Scope, r.Priority = nil, kernel.ScopeUniverse, 256
	}
	if n.findRoute(r) < 0 {
		n.routes = append(n.routes, r)
	}
}

func (h *handle) AddrAdd(linkIndex int, addr *net.IPNet) error {
	return h.with(func(n *netns) error {
		l, ok := n.links[linkIndex]
		if !ok {
			return noLink(fmt.Sprintf("index %d", linkIndex))
		}
		if addr == nil || addr.IP == nil {
			return fmt.Errorf("address: %w", syscall.EINVAL)
		}
		for _, a := range n.addrs {
			if a.LinkIndex == linkIndex && sameNet(a.IPNet, addr) {
				return fmt.Errorf("address %s on %s: %w", addr, l.Name, syscall.EEXIST)
			}
		}
		ip := addr.IP
		if ip.To4() != nil {
			ip = ip.To4()
		}
		n.addAddr(l, &net.IPNet{IP: ip, Mask: addr.Mask})
		return nil
	})
}

func (h *handle) AddrDel(linkIndex int, addr *net.IPNet) error {
	return h.with(func(n *netns) error {
		for i, a := range n.addrs {
			if a.LinkIndex == linkIndex && sameNet(a.IPNet, addr) {
				n.addrs = append(n.addrs[:i], n.addrs[i+1:]...)
				n.routes = filter(n.routes, func(r kernel.Route) bool {
					return !(r.LinkIndex == linkIndex && (sameNet(r.Dst, hostNet(addr.IP)) && r.Table == kernel.TableLocal ||
						r.Protocol == 2 && sameNet(r.Dst, masked(addr))))
				})
				return nil
			}
		}
		return fmt.Errorf("address %s: %w", addr, syscall.EADDRNOTAVAIL)
	})
}

func (h *handle) AddrList(linkIndex int, family kernel.Family) (out []kernel.Addr, err error) {
	err = h.with(func(n *netns) error {
		for _, a := range n.addrs {
			if (linkIndex == 0 || a.LinkIndex == linkIndex) && (family == kernel.FamilyAll || familyOfNet(a.IPNet) == family) {
				out = append(out, a)
			}
		}
		return nil
	})
	return out, err
}

func (h *handle) NeighSet(nb kernel.Neigh) error {
	return h.with(func(n *netns) error {
		if _, ok := n.links[nb.LinkIndex]; !ok {
			return noLink(fmt.Sprintf("index %d", nb.LinkIndex))
		}
		for i, e := range n.neighs {
			if e.LinkIndex == nb.LinkIndex && e.IP.Equal(nb.IP) {
				n.neighs[i] = nb
				return nil
			}
		}
		n.neighs = append(n.neighs, nb)
		return nil
	})
}

func (h *handle) NeighList(linkIndex int, family kernel.Family) (out []kernel.Neigh, err error) {
	err = h.with(func(n *netns) error {
		for _, e := range n.neighs {
			if (linkIndex == 0 || e.LinkIndex == linkIndex) && (family == kernel.FamilyAll || kernel.FamilyOf(e.IP) == family) {
				out = append(out, e)
			}
		}
		return nil
	})
	return out, err
}

// ifaceOfKey returns the interface a per-interface sysctl key names.
func ifaceOfKey(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) == 5 && parts[0] == "net" && (parts[2] == "conf" || parts[2] == "neigh") {
		return parts[3]
	}
	return ""
}

func (h *handle) SysctlSet(key, value string) error {
	return h.with(func(n *netns) error {
		if err := n.checkSysctl(key); err != nil {
			return err
		}
		n.sysctl[key] = value
		return nil
	})
}

func (h *handle) SysctlGet(key string) (v string, err error) {
	err = h.with(func(n *netns) error {
		if err := n.checkSysctl(key); err != nil {
			return err
		}
		v = n.sysctl[key]
		if v == "" {
			v = "0"
		}
		return nil
	})
	return v, err
}

// checkSysctl: a per-interface key exists only while its interface does,
// as /proc/sys/net/ipv{4,6}/conf/<if>/ does; others only under net/.
func (n *netns) checkSysctl(key string) error {
	if !strings.HasPrefix(key, "net/ipv4/") && !strings.HasPrefix(key, "net/ipv6/") && !strings.HasPrefix(key, "net/core/") {
		return fmt.Errorf("sysctl %s: %w", key, syscall.ENOENT)
	}
	if ifc := ifaceOfKey(key); ifc != "" && ifc != "all" && ifc != "default" && n.byName(ifc) == nil {
		return fmt.Errorf("sysctl %s: %w", key, syscall.ENOENT)
	}
	return nil
}
