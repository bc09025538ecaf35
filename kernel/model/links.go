package model

import (
	"fmt"
	"sort"
	"strings"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// addLink gives the link the namespace's next index (indexes only grow
// while the namespace lives) and creates its sysctls.
func (n *netns) addLink(l *link) {
	l.Index = n.nextIndex
	n.nextIndex++
	n.links[l.Index] = l
	n.names[l.Name] = l
	n.addLinkSysctls(l)
}

func (n *netns) indexes() []int {
	idx := make([]int, 0, len(n.links))
	for i := range n.links {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

// byName finds a link by its name (names are unique in a namespace and
// never change: a link is only added, by addLink, or deleted, by delLink).
func (n *netns) byName(name string) *link { return n.names[name] }

// checkNewName applies the kernel's checks on a new interface name:
// ERANGE for more than IFNAMSIZ-1 bytes (the netlink attribute policy,
// measured), EINVAL for an empty name or one dev_valid_name refuses,
// EEXIST for a name in use in the namespace.
func (n *netns) checkNewName(name string) error {
	if len(name) > kernel.MaxLinkNameLen {
		return fmt.Errorf("link name %q: %w", name, syscall.ERANGE)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("link name %q: %w", name, syscall.EINVAL)
	}
	if n.byName(name) != nil {
		return fmt.Errorf("link %s: %w", name, syscall.EEXIST)
	}
	return nil
}

// checkMTU: 68 is IPv4's minimum, 65535 ETH_MAX_MTU (veth's maximum).
func checkMTU(mtu int) error {
	if mtu < 68 || mtu > 65535 {
		return fmt.Errorf("mtu %d: %w", mtu, syscall.EINVAL)
	}
	return nil
}

// delLink removes a link with everything that depends on it: its routes
// in every table, its addresses (and the IPv4 routes of main elsewhere
// that used them as preferred source, see dropPrefsrc), neighbours and
// sysctls, its VLAN children, and its veth peer with the same cascade in
// the peer's namespace. Rules are left alone, as Linux does.
func (n *netns) delLink(l *link) {
	if n.links[l.Index] != l {
		return
	}
	delete(n.links, l.Index)
	delete(n.names, l.Name)
	var gone []kernel.Addr
	n.addrs = filter(n.addrs, func(a kernel.Addr) bool {
		if a.LinkIndex == l.Index {
			gone = append(gone, a)
			return false
		}
		return true
	})
	n.routes = filter(n.routes, func(r route) bool { return r.LinkIndex != l.Index })
	n.neighs = filter(n.neighs, func(nb kernel.Neigh) bool { return nb.LinkIndex != l.Index })
	for _, a := range gone {
		n.dropPrefsrc(a, true)
	}
	for _, c := range n.links {
		if c.Kind == kernel.KindVlan && c.ParentIndex == l.Index {
			n.delLink(c)
		}
	}
	if l.Kind == kernel.KindVeth && l.peerNS != nil {
		if p, ok := l.peerNS.links[l.ParentIndex]; ok && p.peerNS == n {
			p.peerNS = nil // stop the recursion
			l.peerNS.delLink(p)
		}
	}
}

func (h *handle) LinkList() (out []kernel.Link, err error) {
	err = h.with(func(n *netns) error {
		for _, i := range n.indexes() {
			out = append(out, copyLink(n.links[i].Link))
		}
		return nil
	})
	return out, err
}

func (h *handle) LinkByName(name string) (out kernel.Link, err error) {
	err = h.with(func(n *netns) error {
		l := n.byName(name)
		if l == nil {
			return noLink(name)
		}
		out = copyLink(l.Link)
		return nil
	})
	return out, err
}

func (h *handle) LinkByIndex(index int) (out kernel.Link, err error) {
	err = h.with(func(n *netns) error {
		l, ok := n.links[index]
		if !ok {
			return noIndex(index)
		}
		out = copyLink(l.Link)
		return nil
	})
	return out, err
}

// AddVeth creates the pair with the peer directly in the peer's namespace.
// Both ends get the same MTU (1500 when 0) and start down.
func (h *handle) AddVeth(s kernel.VethSpec) error {
	var peer *handle
	if s.PeerNamespace != nil {
		ph, ok := s.PeerNamespace.(*handle)
		if !ok || ph.k != h.k {
			return fmt.Errorf("veth peer namespace is not a handle of this model: %w", syscall.EINVAL)
		}
		peer = ph
	}
	return h.change(func(n *netns) error {
		pn := n
		if peer != nil {
			if peer.closed {
				return fmt.Errorf("peer handle on %s is closed: %w", peer.path, syscall.EBADF)
			}
			if h.k.ns[peer.path] != peer.n {
				return fmt.Errorf("peer namespace %s: %w", peer.path, kernel.ErrNamespaceGone)
			}
			pn = peer.n
		}
		// Both names are checked for emptiness (kernel/linux refuses
		// before sending) and then for length (netlink attribute policy:
		// rtnl_newlink parses the peer's attributes before it looks for
		// either name), and only then for use, the link's name first.
		for _, name := range []string{s.Name, s.PeerName} {
			if name == "" {
				return fmt.Errorf("empty link name: %w", syscall.EINVAL)
			}
		}
		for _, name := range []string{s.Name, s.PeerName} {
			if len(name) > kernel.MaxLinkNameLen {
				return fmt.Errorf("link name %q: %w", name, syscall.ERANGE)
			}
		}
		if err := n.checkNewName(s.Name); err != nil {
			return err
		}
		if err := pn.checkNewName(s.PeerName); err != nil {
			return err
		}
		if pn == n && s.Name == s.PeerName {
			return fmt.Errorf("veth %s: %w", s.Name, syscall.EEXIST)
		}
		mtu := s.MTU
		if mtu == 0 {
			mtu = 1500
		}
		if err := checkMTU(mtu); err != nil {
			return err
		}
		a := &link{Link: kernel.Link{Name: s.Name, Kind: kernel.KindVeth, MTU: mtu, HardwareAddr: h.k.mac(s.HardwareAddr)}, peerNS: pn}
		b := &link{Link: kernel.Link{Name: s.PeerName, Kind: kernel.KindVeth, MTU: mtu, HardwareAddr: h.k.mac(s.PeerHardwareAddr)}, peerNS: n}
		// Linux registers the peer first.
		pn.addLink(b)
		n.addLink(a)
		a.ParentIndex, b.ParentIndex = b.Index, a.Index
		return nil
	})
}

// AddVlan creates an 802.1Q link on a parent of this namespace: ENODEV
// for a missing parent, ERANGE for an id outside 0-4094, EEXIST for a
// second link with the same id on the parent, EOPNOTSUPP on loopback.
func (h *handle) AddVlan(s kernel.VlanSpec) error {
	return h.change(func(n *netns) error {
		p, ok := n.links[s.ParentIndex]
		if !ok {
			return noIndex(s.ParentIndex)
		}
		if p.Kind == kernel.KindLoopback {
			return fmt.Errorf("vlan on %s: %w", p.Name, syscall.EOPNOTSUPP)
		}
		if s.VlanID < 0 || s.VlanID >= 4095 {
			return fmt.Errorf("vlan id %d: %w", s.VlanID, syscall.ERANGE)
		}
		if err := n.checkNewName(s.Name); err != nil {
			return err
		}
		for _, l := range n.links {
			if l.Kind == kernel.KindVlan && l.ParentIndex == s.ParentIndex && l.VlanID == s.VlanID {
				return fmt.Errorf("vlan %d on %s: %w", s.VlanID, p.Name, syscall.EEXIST)
			}
		}
		mtu := s.MTU
		if mtu == 0 {
			mtu = p.MTU
		}
		if mtu > p.MTU {
			return fmt.Errorf("vlan mtu %d over %s's %d: %w", mtu, p.Name, p.MTU, syscall.EINVAL)
		}
		n.addLink(&link{Link: kernel.Link{Name: s.Name, Kind: kernel.KindVlan, MTU: mtu, HardwareAddr: h.k.mac(s.HardwareAddr),
			ParentIndex: s.ParentIndex, VlanID: s.VlanID}})
		return nil
	})
}

func (h *handle) AddBridge(name string, mtu int) error {
	return h.change(func(n *netns) error {
		if err := n.checkNewName(name); err != nil {
			return err
		}
		if mtu == 0 {
			mtu = 1500
		}
		if err := checkMTU(mtu); err != nil {
			return err
		}
		n.addLink(&link{Link: kernel.Link{Name: name, Kind: kernel.KindBridge, MTU: mtu, HardwareAddr: h.k.mac(nil)}})
		return nil
	})
}

// LinkDel deletes a link and what depends on it; lo cannot be deleted
// (EOPNOTSUPP, as Linux answers).
func (h *handle) LinkDel(name string) error {
	return h.change(func(n *netns) error {
		l := n.byName(name)
		if l == nil {
			return noLink(name)
		}
		if l.Kind == kernel.KindLoopback {
			return fmt.Errorf("link %s: %w", name, syscall.EOPNOTSUPP)
		}
		n.delLink(l)
		return nil
	})
}

// LinkDelIndex is LinkDel by ifindex.
func (h *handle) LinkDelIndex(index int) error {
	return h.change(func(n *netns) error {
		for _, l := range n.links {
			if l.Index != index {
				continue
			}
			if l.Kind == kernel.KindLoopback {
				return fmt.Errorf("link %s: %w", l.Name, syscall.EOPNOTSUPP)
			}
			n.delLink(l)
			return nil
		}
		return noLink(fmt.Sprintf("ifindex %d", index))
	})
}

// LinkSetMTU sets one link's MTU within the bounds Linux checks: 68 to
// 65535, and a VLAN no higher than its parent's.
func (h *handle) LinkSetMTU(name string, mtu int) error {
	return h.change(func(n *netns) error {
		l := n.byName(name)
		if l == nil {
			return noLink(name)
		}
		if err := checkMTU(mtu); err != nil {
			return err
		}
		if l.Kind == kernel.KindVlan {
			if p, ok := n.links[l.ParentIndex]; ok && mtu > p.MTU {
				return fmt.Errorf("vlan mtu %d over %s's %d: %w", mtu, p.Name, p.MTU, syscall.EINVAL)
			}
		}
		l.MTU = mtu
		return nil
	})
}

// LinkSetUp sets a link up. On lo this brings 127.0.0.1/8 and ::1; on any
// link it adds the connected routes of the addresses it already has, which
// Linux only installs on a link that is up.
func (h *handle) LinkSetUp(name string) error {
	return h.change(func(n *netns) error {
		l := n.byName(name)
		if l == nil {
			return noLink(name)
		}
		if l.Up {
			return nil
		}
		l.Up = true
		if l.Kind == kernel.KindLoopback {
			for _, s := range []string{"127.0.0.1/8", "::1/128"} {
				a := mustCIDR(s)
				if n.findAddr(l.Index, a) < 0 && (familyOfNet(a) == kernel.FamilyV4 || !n.ipv6Disabled(l.Name)) {
					n.addAddr(l, a)
				}
			}
		}
		for _, a := range n.addrs {
			if a.LinkIndex == l.Index {
				n.addPrefixRoute(l, a)
			}
		}
		return nil
	})
}
