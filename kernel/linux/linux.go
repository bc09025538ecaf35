// Package linux is kernel.API on the real kernel, through
// vishvananda/netlink. Every handle is bound to one network namespace and
// keeps the namespace's file descriptor open until Close, so no caller
// switches its thread's namespace. A handle on another namespace (a path)
// makes its netlink socket there with netlink.NewHandleAt; a handle on the
// caller's current namespace ("") makes it where the calling thread is,
// with netlink.NewHandle, and so never calls setns(2), which needs
// CAP_SYS_ADMIN: ipamd runs with NET_ADMIN and NET_RAW only, as the
// reference's aws-node does. Sysctls, which have no netlink form, are read
// and written under /proc/sys directly when the calling thread is in the
// handle's namespace (always so for "" in a process that stays in its
// namespace), else from inside the namespace on a thread of their own.
//
// Errors are the kernel's: netlink returns syscall.Errno values and they
// are passed on unchanged (wrapped at most), except that netlink's
// LinkNotFoundError becomes ENODEV and the few requests netlink itself
// refuses with a plain string (an empty link name, mixed address
// families) are refused here with EINVAL first, so errors.Is works the
// same on the model and on Linux.
package linux

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

// Opener opens handles on namespaces by path; "" is the calling thread's
// current namespace (the node's, for the plugin and ipamd).
type Opener struct{}

// nsGetNSType is NS_GET_NSTYPE (_IO(0xb7, 0x3)): which kind of namespace
// a namespace file is.
const nsGetNSType = 0xb703

// Open returns a handle on the namespace at path. A path that does not
// exist, or is not a network namespace (a file left behind by an unmounted
// bind mount, another kind of namespace), is an error wrapping
// kernel.ErrNamespaceGone.
//
// Open("") makes no setns(2): its namespace file and netlink socket are
// both taken on the calling thread (locked meanwhile), so a thread that
// was moved into another namespace gets that namespace.
func (Opener) Open(path string) (kernel.API, error) {
	var ns netns.NsHandle
	var err error
	if path == "" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ns, err = netns.Get()
	} else {
		ns, err = netns.GetFromPath(path)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("open %s: %w", path, kernel.ErrNamespaceGone)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", path, err)
	}
	if t, err := unix.IoctlRetInt(int(ns), nsGetNSType); err != nil || t != unix.CLONE_NEWNET {
		ns.Close()
		return nil, fmt.Errorf("open %s: not a network namespace: %w", path, kernel.ErrNamespaceGone)
	}
	// Only rtnetlink: a handle opens a socket per family it is given (all
	// three by default, each made by entering the namespace), and nothing
	// here speaks xfrm or netfilter.
	var h *netlink.Handle
	if path == "" {
		// A socket belongs to the namespace of the thread that makes it:
		// this one, which ns was just taken from.
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink handle in %q: %w", path, err)
	}
	return &Handle{nl: h, ns: ns, path: path}, nil
}

// Handle is a kernel.API on one real namespace. It is safe for concurrent
// use; after Close every method fails with EBADF.
type Handle struct {
	nl   *netlink.Handle
	ns   netns.NsHandle
	path string

	mu     sync.RWMutex
	closed bool
}

// Close releases the netlink sockets and the namespace file descriptor.
// It is idempotent: a second Close must not close a descriptor number the
// process has since reused.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	h.nl.Close()
	return h.ns.Close()
}

// use runs fn unless the handle is closed, and keeps Close out meanwhile.
func (h *Handle) use(fn func() error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return fmt.Errorf("handle on %q is closed: %w", h.path, syscall.EBADF)
	}
	return fn()
}

// dumpRetries bounds the retries of a dump the kernel reports as
// interrupted (NLM_F_DUMP_INTR: the table changed while it was read).
const dumpRetries = 5

func dump[T any](fn func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for i := 0; i < dumpRetries; i++ {
		if out, err = fn(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

// notFound gives netlink's "link not found" the errno Linux uses.
func notFound(err error, what string) error {
	var lnf netlink.LinkNotFoundError
	if errors.As(err, &lnf) {
		return fmt.Errorf("link %s: %w", what, syscall.ENODEV)
	}
	return err
}

// checkName refuses an empty name with EINVAL (netlink refuses it with a
// plain string). Long names go to the kernel, which answers ERANGE.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty link name: %w", syscall.EINVAL)
	}
	return nil
}

func toLink(l netlink.Link) kernel.Link {
	a := l.Attrs()
	k := kernel.Link{Index: a.Index, Name: a.Name, Kind: l.Type(), MTU: a.MTU, HardwareAddr: a.HardwareAddr,
		Up: a.Flags&net.FlagUp != 0, ParentIndex: a.ParentIndex}
	if v, ok := l.(*netlink.Vlan); ok {
		k.VlanID = v.VlanId
	}
	if _, ok := l.(*netlink.Device); ok {
		k.Kind = kernel.KindDevice
	}
	if a.EncapType == "loopback" || a.Flags&net.FlagLoopback != 0 {
		k.Kind = kernel.KindLoopback
	}
	return k
}

func (h *Handle) LinkList() (out []kernel.Link, err error) {
	err = h.use(func() error {
		ls, err := dump(h.nl.LinkList)
		for _, l := range ls {
			out = append(out, toLink(l))
		}
		return err
	})
	return out, err
}

func (h *Handle) LinkByName(name string) (out kernel.Link, err error) {
	err = h.use(func() error {
		l, err := h.nl.LinkByName(name)
		if err != nil {
			return notFound(err, name)
		}
		out = toLink(l)
		return nil
	})
	return out, err
}

func (h *Handle) LinkByIndex(index int) (out kernel.Link, err error) {
	err = h.use(func() error {
		l, err := h.link(index)
		if err == nil {
			out = toLink(l)
		}
		return err
	})
	return out, err
}

// link looks a link up by index (callers hold use).
func (h *Handle) link(index int) (netlink.Link, error) {
	if index <= 0 {
		return nil, fmt.Errorf("link index %d: %w", index, syscall.ENODEV)
	}
	l, err := h.nl.LinkByIndex(index)
	if err != nil {
		return nil, notFound(err, fmt.Sprintf("index %d", index))
	}
	return l, nil
}

// AddVeth creates the pair from this namespace with the peer created
// directly in the peer's namespace (IFLA_NET_NS_FD): no move afterwards,
// so a crash cannot leave the peer in the wrong one.
func (h *Handle) AddVeth(s kernel.VethSpec) error {
	if err := checkName(s.Name); err != nil {
		return err
	}
	if err := checkName(s.PeerName); err != nil {
		return err
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.Name, MTU: s.MTU, HardwareAddr: s.HardwareAddr},
		PeerName: s.PeerName, PeerHardwareAddr: s.PeerHardwareAddr}
	var peer *Handle
	if s.PeerNamespace != nil {
		p, ok := s.PeerNamespace.(*Handle)
		if !ok {
			return fmt.Errorf("veth peer namespace is a %T, not a kernel/linux handle: %w", s.PeerNamespace, syscall.EINVAL)
		}
		peer = p
	}
	if peer != nil && peer != h {
		// A duplicate of the peer's descriptor, so the two handles' locks
		// are never held together.
		var fd int
		if err := peer.use(func() error {
			var err error
			fd, err = unix.Dup(int(peer.ns))
			return err
		}); err != nil {
			return fmt.Errorf("veth peer namespace: %w", err)
		}
		defer unix.Close(fd)
		v.PeerNamespace = netlink.NsFd(fd)
	}
	return h.use(func() error { return h.nl.LinkAdd(v) })
}

// AddVlan creates an 802.1Q link; the kernel's answer is returned as is
// (EOPNOTSUPP on a kernel without 802.1Q, ENODEV for a missing parent).
func (h *Handle) AddVlan(s kernel.VlanSpec) error {
	if err := checkName(s.Name); err != nil {
		return err
	}
	return h.use(func() error {
		return h.nl.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: s.Name, ParentIndex: s.ParentIndex, MTU: s.MTU,
			HardwareAddr: s.HardwareAddr}, VlanId: s.VlanID})
	})
}

func (h *Handle) AddBridge(name string, mtu int) error {
	if err := checkName(name); err != nil {
		return err
	}
	return h.use(func() error { return h.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}) })
}

func (h *Handle) LinkDel(name string) error {
	return h.use(func() error {
		l, err := h.nl.LinkByName(name)
		if err != nil {
			return notFound(err, name)
		}
		return h.nl.LinkDel(l)
	})
}

func (h *Handle) LinkDelIndex(index int) error {
	if index <= 0 {
		return fmt.Errorf("ifindex %d: %w", index, syscall.EINVAL)
	}
	return h.use(func() error {
		// The request names the link by its index alone.
		return notFound(h.nl.LinkDel(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index}}), fmt.Sprintf("ifindex %d", index))
	})
}

func (h *Handle) LinkSetMTU(name string, mtu int) error {
	return h.use(func() error {
		l, err := h.nl.LinkByName(name)
		if err != nil {
			return notFound(err, name)
		}
		return h.nl.LinkSetMTU(l, mtu)
	})
}

func (h *Handle) LinkSetUp(name string) error {
	return h.use(func() error {
		l, err := h.nl.LinkByName(name)
		if err != nil {
			return notFound(err, name)
		}
		return h.nl.LinkSetUp(l)
	})
}

// SnapshotAt reads every kernel object of the network namespace at path
// (a pod's CNI_NETNS, a named namespace, /proc/PID/ns/net), read-only.
func SnapshotAt(path string) (kernel.State, error) {
	h, err := Opener{}.Open(path)
	if err != nil {
		return kernel.State{}, err
	}
	defer h.Close()
	return kernel.Snapshot(h)
}
