package model

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

const (
	addrFlagSecondary = 0x01 // IFA_F_SECONDARY
	protoKernel       = 2    // RTPROT_KERNEL: routes the kernel makes for addresses
	protoBoot         = 3    // RTPROT_BOOT: what netlink sends for user routes
)

func mustCIDR(s string) *net.IPNet {
	ip, ipn, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	ipn.IP = ip
	return cloneNet(ipn)
}

// findAddr finds an address by the kernel's identity: for IPv4 the local
// address and prefix length on the link, for IPv6 the address alone.
func (n *netns) findAddr(linkIndex int, ipn *net.IPNet) int {
	v6 := familyOfNet(ipn) == kernel.FamilyV6
	for i, a := range n.addrs {
		if a.LinkIndex == linkIndex && a.IPNet.IP.Equal(ipn.IP) && (v6 || prefixLen(a.IPNet) == prefixLen(ipn)) {
			return i
		}
	}
	return -1
}

// hasLocal reports whether any link of the namespace holds ip.
func (n *netns) hasLocal(ip net.IP) bool {
	for _, a := range n.addrs {
		if a.IPNet.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func addrScope(ip net.IP) kernel.Scope {
	switch {
	case ip.IsLoopback():
		return kernel.ScopeHost
	case ip.To4() == nil && ip.IsLinkLocalUnicast():
		return kernel.ScopeLink
	}
	return kernel.ScopeUniverse
}

// addAddr adds an address with its local-table route, and its connected
// route when the link is up. An IPv4 address in the prefix of a primary
// one on the same link (same mask) becomes a secondary, as in Linux.
func (n *netns) addAddr(l *link, ipn *net.IPNet) {
	a := kernel.Addr{LinkIndex: l.Index, IPNet: cloneNet(ipn), Scope: addrScope(ipn.IP), Flags: kernel.AddrFlagPermanent}
	fam := familyOfNet(ipn)
	if fam == kernel.FamilyV4 {
		for _, p := range n.addrs {
			if p.LinkIndex == l.Index && p.Flags&addrFlagSecondary == 0 && familyOfNet(p.IPNet) == fam &&
				prefixLen(p.IPNet) == prefixLen(ipn) && p.IPNet.Contains(ipn.IP) {
				a.Flags |= addrFlagSecondary
				break
			}
		}
	}
	n.addrs = append(n.addrs, a)
	local := kernel.Route{Table: kernel.TableLocal, Dst: hostNet(ipn.IP), LinkIndex: l.Index, Family: fam,
		Type: kernel.RouteTypeLocal, Protocol: protoKernel}
	if fam == kernel.FamilyV4 {
		local.Scope, local.Src = kernel.ScopeHost, cloneIP(ipn.IP)
	}
	n.ensureRoute(local)
	if l.Up {
		n.addPrefixRoute(l, a)
	}
}

// addPrefixRoute adds the connected route of a primary address: IPv4,
// for a prefix shorter than /32, in main (proto kernel, scope link, src
// the address; on lo a local route in the local table); IPv6, whatever the
// prefix length, in main with metric 256.
func (n *netns) addPrefixRoute(l *link, a kernel.Addr) {
	if r, ok := prefixRoute(l, a); ok {
		n.ensureRoute(r)
	}
}

func prefixRoute(l *link, a kernel.Addr) (kernel.Route, bool) {
	ones, bits := a.IPNet.Mask.Size()
	v6 := familyOfNet(a.IPNet) == kernel.FamilyV6
	// IPv6 makes one even for a /128, except for lo's ::1 (measured);
	// IPv4 not for a /32.
	if (ones == bits && !v6) || a.Flags&addrFlagSecondary != 0 || (v6 && a.IPNet.IP.IsLoopback()) {
		return kernel.Route{}, false
	}
	r := kernel.Route{Table: kernel.TableMain, Dst: masked(a.IPNet), LinkIndex: l.Index, Family: familyOfNet(a.IPNet),
		Type: kernel.RouteTypeUnicast, Protocol: protoKernel}
	switch {
	case r.Family == kernel.FamilyV6:
		r.Priority = 256
	case l.Kind == kernel.KindLoopback:
		r.Table, r.Type, r.Scope, r.Src = kernel.TableLocal, kernel.RouteTypeLocal, kernel.ScopeHost, cloneIP(a.IPNet.IP)
	default:
		r.Scope, r.Src = kernel.ScopeLink, cloneIP(a.IPNet.IP)
	}
	return r, true
}

// ensureRoute adds a kernel-made route unless the very same one is there
// already. Linux appends it (NLM_F_APPEND) next to other routes with the
// same destination and metric, so a user's "10.0.2.0/24 via 10.0.1.1 dev
// eth0" does not stop eth0's address 10.0.2.10/24 from bringing its
// connected route.
func (n *netns) ensureRoute(r kernel.Route) {
	for _, e := range n.routes {
		if e.Table == r.Table && e.Family == r.Family && sameNet(e.Dst, r.Dst) && e.LinkIndex == r.LinkIndex &&
			e.Priority == r.Priority && ipEqual(e.Gw, r.Gw) && e.Scope == r.Scope && ipEqual(e.Src, r.Src) &&
			e.Protocol == r.Protocol && e.Type == r.Type {
			return
		}
	}
	n.tables[table{r.Family, r.Table}] = true
	n.routes = append(n.routes, route{Route: r})
}

// delAddr removes the address at index i with the kernel's side effects.
// IPv4: deleting a primary deletes its secondaries, or promotes the first
// when promote_secondaries is set; the local and connected routes go;
// routes of main that had the address as preferred source go once no link
// holds it; when the link has no IPv4 address left, all its IPv4 routes
// and neighbours are flushed. IPv6: the local route goes, and a route to
// the prefix (see delPrefixRoute6); the address stops being any route's
// preferred source.
func (n *netns) delAddr(i int) {
	a := n.addrs[i]
	n.addrs = append(n.addrs[:i], n.addrs[i+1:]...)
	l := n.links[a.LinkIndex]
	fam := familyOfNet(a.IPNet)
	if pr, ok := prefixRoute(l, a); ok && !n.prefixRouteShared(l, pr) {
		if fam == kernel.FamilyV4 {
			// fib_magic deletes the route the kernel made, and only it.
			n.routes = filter(n.routes, func(r route) bool {
				return !(r.Protocol == protoKernel && r.Table == pr.Table && r.LinkIndex == l.Index && sameNet(r.Dst, pr.Dst) &&
					ipEqual(r.Src, pr.Src))
			})
		} else {
			n.delPrefixRoute6(pr)
		}
	}
	if fam == kernel.FamilyV4 && a.Flags&addrFlagSecondary == 0 {
		var secs []int
		for j, s := range n.addrs {
			if s.LinkIndex == l.Index && s.Flags&addrFlagSecondary != 0 && prefixLen(s.IPNet) == prefixLen(a.IPNet) &&
				a.IPNet.Contains(s.IPNet.IP) {
				secs = append(secs, j)
			}
		}
		if len(secs) > 0 && n.confOr(kernel.FamilyV4, l.Name, "promote_secondaries") {
			n.addrs[secs[0]].Flags &^= addrFlagSecondary
			if l.Up {
				n.addPrefixRoute(l, n.addrs[secs[0]])
			}
		} else {
			for k := len(secs) - 1; k >= 0; k-- {
				n.delAddr(secs[k])
			}
		}
	}
	if n.findAddrIP(l.Index, a.IPNet.IP) < 0 {
		dst := hostNet(a.IPNet.IP)
		n.routes = filter(n.routes, func(r route) bool {
			return !(r.Table == kernel.TableLocal && r.Type == kernel.RouteTypeLocal && r.LinkIndex == l.Index && sameNet(r.Dst, dst))
		})
	}
	n.dropPrefsrc(a, false)
	if fam == kernel.FamilyV4 && !n.hasFamilyAddr(l.Index, fam) {
		n.routes = filter(n.routes, func(r route) bool { return !(r.LinkIndex == l.Index && r.Family == fam) })
		n.neighs = filter(n.neighs, func(nb kernel.Neigh) bool {
			return !(nb.LinkIndex == l.Index && kernel.FamilyOf(nb.IP) == fam)
		})
	}
}

// delPrefixRoute6 is cleanup_prefix_route: it deletes the first route of
// main to the prefix on the link without a gateway, lowest metric first,
// whoever made it (addrconf_get_prefix_route looks at neither protocol nor
// metric), so a user's route goes in place of a kernel route deleted
// before.
func (n *netns) delPrefixRoute6(pr kernel.Route) {
	at := -1
	for i, r := range n.routes {
		if r.Table == pr.Table && r.Family == pr.Family && r.LinkIndex == pr.LinkIndex && sameNet(r.Dst, pr.Dst) && r.Gw == nil &&
			(at < 0 || r.Priority < n.routes[at].Priority) {
			at = i
		}
	}
	if at >= 0 {
		n.routes = append(n.routes[:at], n.routes[at+1:]...)
	}
}

// prefixRouteShared: another address of the link still needs the same
// connected route (two IPv6 addresses in one /64).
func (n *netns) prefixRouteShared(l *link, pr kernel.Route) bool {
	for _, o := range n.addrs {
		if o.LinkIndex != l.Index {
			continue
		}
		if r, ok := prefixRoute(l, o); ok && r.Table == pr.Table && sameNet(r.Dst, pr.Dst) && ipEqual(r.Src, pr.Src) {
			return true
		}
	}
	return false
}

func (n *netns) findAddrIP(linkIndex int, ip net.IP) int {
	for i, a := range n.addrs {
		if a.LinkIndex == linkIndex && a.IPNet.IP.Equal(ip) {
			return i
		}
	}
	return -1
}

func (n *netns) hasFamilyAddr(linkIndex int, fam kernel.Family) bool {
	for _, a := range n.addrs {
		if a.LinkIndex == linkIndex && familyOfNet(a.IPNet) == fam {
			return true
		}
	}
	return false
}

// dropPrefsrc is what becomes of routes using a deleted address as
// preferred source once no link holds it (both measured). IPv4: those of
// table main are deleted, on whatever link (fib_sync_down_addr kills only
// the main table's); the other tables' stay. IPv6: they lose it
// (rt6_remove_prefsrc), but only when the address itself is deleted: when
// its link goes, Linux leaves other links' routes as they are (linkGone).
func (n *netns) dropPrefsrc(a kernel.Addr, linkGone bool) {
	ip := a.IPNet.IP
	if n.hasLocal(ip) {
		return
	}
	if ip.To4() != nil {
		n.routes = filter(n.routes, func(r route) bool { return !(r.Table == kernel.TableMain && ipEqual(r.Src, ip)) })
		return
	}
	if linkGone {
		return
	}
	for i, r := range n.routes {
		if ipEqual(r.Src, ip) {
			n.routes[i].Src = nil
		}
	}
}

// AddrAdd: ENODEV for a missing link, EEXIST for an address the link has
// (IPv4: same address and prefix length; IPv6: same address), EACCES for
// IPv6 on a link with disable_ipv6 set.
func (h *handle) AddrAdd(linkIndex int, addr *net.IPNet) error {
	return h.change(func(n *netns) error {
		l, ok := n.links[linkIndex]
		if !ok {
			return noIndex(linkIndex)
		}
		if addr == nil || addr.IP == nil || len(addr.Mask) == 0 {
			return fmt.Errorf("address %v: %w", addr, syscall.EINVAL)
		}
		a := cloneNet(addr)
		if _, bits := a.Mask.Size(); bits != len(a.IP)*8 {
			return fmt.Errorf("address %v: mask of another family: %w", addr, syscall.EINVAL)
		}
		if familyOfNet(a) == kernel.FamilyV6 && n.ipv6Disabled(l.Name) {
			return fmt.Errorf("address %s on %s: IPv6 is disabled: %w", a, l.Name, syscall.EACCES)
		}
		if n.findAddr(linkIndex, a) >= 0 {
			return fmt.Errorf("address %s on %s: %w", a, l.Name, syscall.EEXIST)
		}
		n.addAddr(l, a)
		return nil
	})
}

// AddrDel deletes an address by address and prefix length; EADDRNOTAVAIL
// when the link has no such address, ENODEV when there is no such link.
func (h *handle) AddrDel(linkIndex int, addr *net.IPNet) error {
	return h.change(func(n *netns) error {
		if _, ok := n.links[linkIndex]; !ok {
			return noIndex(linkIndex)
		}
		if addr == nil || addr.IP == nil {
			return fmt.Errorf("address %v: %w", addr, syscall.EINVAL)
		}
		a := cloneNet(addr)
		for i, e := range n.addrs {
			if e.LinkIndex == linkIndex && e.IPNet.IP.Equal(a.IP) && prefixLen(e.IPNet) == prefixLen(a) {
				n.delAddr(i)
				return nil
			}
		}
		return fmt.Errorf("address %s: %w", a, syscall.EADDRNOTAVAIL)
	})
}

// AddrList lists addresses (linkIndex 0: every link) in the order they
// were added. Flags carry IFA_F_PERMANENT and IFA_F_SECONDARY; IPv6
// addresses are never tentative here.
func (h *handle) AddrList(linkIndex int, family kernel.Family) (out []kernel.Addr, err error) {
	err = h.with(func(n *netns) error {
		if _, ok := n.links[linkIndex]; linkIndex != 0 && !ok {
			return noIndex(linkIndex)
		}
		for _, a := range n.addrs {
			if (linkIndex == 0 || a.LinkIndex == linkIndex) && (family == kernel.FamilyAll || familyOfNet(a.IPNet) == family) {
				out = append(out, copyAddr(a))
			}
		}
		return nil
	})
	return out, err
}

// NeighSet adds or replaces the entry for (link, address). ENODEV for a
// missing link; EINVAL for IPv6 on a link with IPv6 disabled. On lo an
// IPv4 entry is 0.0.0.0's, as in Linux.
func (h *handle) NeighSet(nb kernel.Neigh) error {
	return h.change(func(n *netns) error {
		l, ok := n.links[nb.LinkIndex]
		if !ok {
			return noIndex(nb.LinkIndex)
		}
		if nb.IP == nil {
			return fmt.Errorf("neighbour without address: %w", syscall.EINVAL)
		}
		if kernel.FamilyOf(nb.IP) == kernel.FamilyV6 && n.ipv6Disabled(l.Name) {
			return fmt.Errorf("neighbour %s on %s: IPv6 is disabled: %w", nb.IP, l.Name, syscall.EINVAL)
		}
		nb = copyNeigh(nb)
		if l.Kind == kernel.KindLoopback && kernel.FamilyOf(nb.IP) == kernel.FamilyV4 {
			// arp_constructor keys every IPv4 entry of a loopback (or
			// point-to-point) device as 0.0.0.0: one entry, whatever
			// address it is set for.
			nb.IP = net.IPv4zero.To4()
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
				out = append(out, copyNeigh(e))
			}
		}
		return nil
	})
	return out, err
}
