// Package linux is kernel.API on the real kernel, through
// vishvananda/netlink. Every handle is bound to one network namespace with
// netlink.NewHandleAt, so no caller switches its thread's namespace; only
// sysctls, which have no netlink form, are written from inside the
// namespace on a locked thread.
package linux

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vpccni/vpccni/kernel"
)

// Opener opens handles on namespaces by path; "" is the calling thread's
// current namespace.
type Opener struct{}

// Open returns a handle on the namespace at path.
func (Opener) Open(path string) (kernel.API, error) {
	var ns netns.NsHandle
	var err error
	if path == "" {
		runtime.LockOSThread()
		ns, err = netns.Get()
		runtime.UnlockOSThread()
	} else {
		ns, err = netns.GetFromPath(path)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("open %s: %w", path, kernel.ErrNamespaceGone)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", path, err)
	}
	if path != "" {
		var st syscall.Statfs_t
		// A path that exists but is not a namespace file (a removed bind
		// mount leaves an empty file) is a namespace that is gone.
		if err := syscall.Fstatfs(int(ns), &st); err == nil && st.Type != nsfsMagic {
			ns.Close()
			return nil, fmt.Errorf("open %s: not a network namespace: %w", path, kernel.ErrNamespaceGone)
		}
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink handle in %q: %w", path, err)
	}
	return &Handle{nl: h, ns: ns, path: path}, nil
}

// nsfsMagic is NSFS_MAGIC: the filesystem of namespace files.
const nsfsMagic = 0x6e736673

// Handle is a kernel.API on one real namespace.
type Handle struct {
	nl   *netlink.Handle
	ns   netns.NsHandle
	path string
}

// Close releases the netlink sockets and the namespace file descriptor.
func (h *Handle) Close() error {
	h.nl.Close()
	return h.ns.Close()
}

// notFound gives netlink's "link not found" the errno Linux uses.
func notFound(err error, what string) error {
	var lnf netlink.LinkNotFoundError
	if errors.As(err, &lnf) {
		return fmt.Errorf("link %s: %w", what, syscall.ENODEV)
	}
	return err
}

func toLink(l netlink.Link) kernel.Link {
	a := l.Attrs()
	k := kernel.Link{Index: a.Index, Name: a.Name, Kind: l.Type(), MTU: a.MTU, HardwareAddr: a.HardwareAddr,
		Up: a.Flags&net.FlagUp != 0, ParentIndex: a.ParentIndex}
	switch v := l.(type) {
	case *netlink.Vlan:
		k.VlanID = v.VlanId
	case *netlink.Device:
		k.Kind = kernel.KindDevice
		if a.Name == "lo" || a.EncapType == "loopback" {
			k.Kind = kernel.KindLoopback
		}
	}
	if a.EncapType == "loopback" {
		k.Kind = kernel.KindLoopback
	}
	return k
}

func (h *Handle) LinkList() ([]kernel.Link, error) {
	ls, err := h.nl.LinkList()
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, toLink(l))
	}
	return out, nil
}

func (h *Handle) LinkByName(name string) (kernel.Link, error) {
	l, err := h.nl.LinkByName(name)
	if err != nil {
		return kernel.Link{}, notFound(err, name)
	}
	return toLink(l), nil
}

func (h *Handle) LinkByIndex(index int) (kernel.Link, error) {
	l, err := h.nl.LinkByIndex(index)
	if err != nil {
		return kernel.Link{}, notFound(err, fmt.Sprintf("index %d", index))
	}
	return toLink(l), nil
}

func (h *Handle) AddVeth(s kernel.VethSpec) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.Name, MTU: s.MTU, HardwareAddr: s.HardwareAddr},
		PeerName: s.PeerName, PeerHardwareAddr: s.PeerHardwareAddr}
	if s.PeerNamespace != nil {
		p, ok := s.PeerNamespace.(*Handle)
		if !ok {
			return fmt.Errorf("veth peer namespace is not a kernel/linux handle: %w", syscall.EINVAL)
		}
		// The peer is created directly in the other namespace: no move
		// afterwards, so a crash cannot leave it in the wrong one.
		v.PeerNamespace = netlink.NsFd(int(p.ns))
	}
	return h.nl.LinkAdd(v)
}

func (h *Handle) AddVlan(s kernel.VlanSpec) error {
	return h.nl.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: s.Name, ParentIndex: s.ParentIndex, MTU: s.MTU,
		HardwareAddr: s.HardwareAddr}, VlanId: s.VlanID})
}

func (h *Handle) AddBridge(name string, mtu int) error {
	return h.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}})
}

func (h *Handle) LinkDel(name string) error {
	l, err := h.nl.LinkByName(name)
	if err != nil {
		return notFound(err, name)
	}
	return h.nl.LinkDel(l)
}

func (h *Handle) LinkSetUp(name string) error {
	l, err := h.nl.LinkByName(name)
	if err != nil {
		return notFound(err, name)
	}
	return h.nl.LinkSetUp(l)
}

func (h *Handle) link(index int) (netlink.Link, error) {
	l, err := h.nl.LinkByIndex(index)
	if err != nil {
		return nil, notFound(err, fmt.Sprintf("index %d", index))
	}
	return l, nil
}

func (h *Handle) AddrAdd(linkIndex int, addr *net.IPNet) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return err
	}
	return h.nl.AddrAdd(l, &netlink.Addr{IPNet: addr})
}

func (h *Handle) AddrDel(linkIndex int, addr *net.IPNet) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return err
	}
	return h.nl.AddrDel(l, &netlink.Addr{IPNet: addr})
}

func (h *Handle) AddrList(linkIndex int, family kernel.Family) ([]kernel.Addr, error) {
	var l netlink.Link
	if linkIndex != 0 {
		var err error
		if l, err = h.link(linkIndex); err != nil {
			return nil, err
		}
	}
	as, err := h.nl.AddrList(l, int(family))
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, kernel.Addr{LinkIndex: a.LinkIndex, IPNet: a.IPNet, Scope: kernel.Scope(a.Scope), Flags: a.Flags})
	}
	return out, nil
}

func (h *Handle) NeighSet(n kernel.Neigh) error {
	return h.nl.NeighSet(&netlink.Neigh{LinkIndex: n.LinkIndex, IP: n.IP, HardwareAddr: n.HardwareAddr,
		State: n.State, Family: int(kernel.FamilyOf(n.IP))})
}

func (h *Handle) NeighList(linkIndex int, family kernel.Family) ([]kernel.Neigh, error) {
	ns, err := h.nl.NeighList(linkIndex, int(family))
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Neigh, 0, len(ns))
	for _, n := range ns {
		out = append(out, kernel.Neigh{LinkIndex: n.LinkIndex, IP: n.IP, HardwareAddr: n.HardwareAddr, State: n.State})
	}
	return out, nil
}
