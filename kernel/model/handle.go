package model

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// handle is a kernel.API bound to one namespace of a Kernel.
type handle struct {
	k      *Kernel
	path   string
	closed bool
}

// with runs fn on the handle's namespace under the machine's lock.
func (h *handle) with(fn func(n *netns) error) error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if h.closed {
		return fmt.Errorf("handle on %s: %w", h.path, syscall.EBADF)
	}
	n, ok := h.k.ns[h.path]
	if !ok {
		return fmt.Errorf("namespace %s: %w", h.path, kernel.ErrNamespaceGone)
	}
	return fn(n)
}

func (h *handle) Close() error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.closed = true
	return nil
}

func noLink(name string) error { return fmt.Errorf("link %s: %w", name, syscall.ENODEV) }

func (h *handle) LinkList() (out []kernel.Link, err error) {
	err = h.with(func(n *netns) error {
		for _, i := range n.indexes() {
			out = append(out, n.links[i].Link)
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
		out = l.Link
		return nil
	})
	return out, err
}

func (h *handle) LinkByIndex(index int) (out kernel.Link, err error) {
	err = h.with(func(n *netns) error {
		l, ok := n.links[index]
		if !ok {
			return noLink(fmt.Sprintf("index %d", index))
		}
		out = l.Link
		return nil
	})
	return out, err
}

func (h *handle) AddVeth(s kernel.VethSpec) error {
	var peerNS string
	if s.PeerNamespace != nil {
		ph, ok := s.PeerNamespace.(*handle)
		if !ok || ph.k != h.k {
			return fmt.Errorf("veth peer namespace is not a handle of this model: %w", syscall.EINVAL)
		}
		peerNS = ph.path
	}
	return h.with(func(n *netns) error {
		pn := n
		if peerNS != "" {
			var ok bool
			if pn, ok = h.k.ns[peerNS]; !ok {
				return fmt.Errorf("peer namespace %s: %w", peerNS, kernel.ErrNamespaceGone)
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
		a := &link{Link: kernel.Link{Name: s.Name, Kind: kernel.KindVeth, MTU: mtu, HardwareAddr: h.k.mac(s.HardwareAddr)}, peerNS: pn}
		b := &link{Link: kernel.Link{Name: s.PeerName, Kind: kernel.KindVeth, MTU: mtu, HardwareAddr: h.k.mac(s.PeerHardwareAddr)}, peerNS: n}
		n.addLink(a)
		pn.addLink(b)
		a.ParentIndex, b.ParentIndex = b.Index, a.Index
		return nil
	})
}

func (h *handle) AddVlan(s kernel.VlanSpec) error {
	return h.with(func(n *netns) error {
		p, ok := n.links[s.ParentIndex]
		if !ok {
			return noLink(fmt.Sprintf("parent index %d", s.ParentIndex))
		}
		if s.VlanID < 1 || s.VlanID > 4094 {
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
		n.addLink(&link{Link: kernel.Link{Name: s.Name, Kind: kernel.KindVlan, MTU: mtu, HardwareAddr: h.k.mac(s.HardwareAddr),
			ParentIndex: s.ParentIndex, VlanID: s.VlanID}})
		return nil
	})
}

func (h *handle) AddBridge(name string, mtu int) error {
	return h.with(func(n *netns) error {
		if err := n.checkNewName(name); err != nil {
			return err
		}
		if mtu == 0 {
			mtu = 1500
		}
		n.addLink(&link{Link: kernel.Link{Name: name, Kind: kernel.KindBridge, MTU: mtu, HardwareAddr: h.k.mac(nil)}})
		return nil
	})
}

func (h *handle) LinkDel(name string) error {
	return h.with(func(n *netns) error {
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

func (h *handle) LinkSetUp(name string) error {
	return h.with(func(n *netns) error {
		l := n.byName(name)
		if l == nil {
			return noLink(name)
		}
		if l.Up {
			return nil
		}
		l.Up = true
		if l.Kind == kernel.KindLoopback {
			for _, a := range []string{"127.0.0.1/8", "::1/128"} {
				ip, ipn, _ := net.ParseCIDR(a)
				ipn.IP = ip
				n.addAddr(l, ipn)
			}
		}
		// Linux adds an address's prefix route only once its link is up.
		for _, a := range n.addrs {
			if a.LinkIndex == l.Index {
				n.addPrefixRoute(l, a.IPNet)
			}
		}
		return nil
	})
}
