package linux

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

func checkAddr(addr *net.IPNet) error {
	if addr == nil || addr.IP == nil || len(addr.Mask) == 0 {
		return fmt.Errorf("address %v: %w", addr, syscall.EINVAL)
	}
	return nil
}

// AddrAdd adds an address as `ip addr add` does (netlink fills in the
// IPv4 broadcast address). IPv6 addresses go through DAD unless the
// link's accept_dad is 0: until then AddrList shows them tentative.
func (h *Handle) AddrAdd(linkIndex int, addr *net.IPNet) error {
	return h.addrOp(linkIndex, addr, h.nl.AddrAdd)
}

func (h *Handle) AddrDel(linkIndex int, addr *net.IPNet) error {
	return h.addrOp(linkIndex, addr, h.nl.AddrDel)
}

// addrOp checks the address and resolves the link for an add or delete.
func (h *Handle) addrOp(linkIndex int, addr *net.IPNet, op func(netlink.Link, *netlink.Addr) error) error {
	if err := checkAddr(addr); err != nil {
		return err
	}
	return h.use(func() error {
		l, err := h.link(linkIndex)
		if err != nil {
			return err
		}
		return op(l, &netlink.Addr{IPNet: addr})
	})
}

func (h *Handle) AddrList(linkIndex int, family kernel.Family) (out []kernel.Addr, err error) {
	err = h.use(func() error {
		var l netlink.Link
		if linkIndex != 0 {
			var err error
			if l, err = h.link(linkIndex); err != nil {
				return err
			}
		}
		as, err := dump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, int(family)) })
		for _, a := range as {
			out = append(out, kernel.Addr{LinkIndex: a.LinkIndex, IPNet: a.IPNet, Scope: kernel.Scope(a.Scope), Flags: a.Flags})
		}
		return err
	})
	return out, err
}

// NeighSet adds or replaces an entry (NLM_F_CREATE|NLM_F_REPLACE).
func (h *Handle) NeighSet(n kernel.Neigh) error {
	if n.IP == nil {
		return fmt.Errorf("neighbour without address: %w", syscall.EINVAL)
	}
	return h.use(func() error {
		return h.nl.NeighSet(&netlink.Neigh{LinkIndex: n.LinkIndex, IP: n.IP, HardwareAddr: n.HardwareAddr,
			State: n.State, Family: int(kernel.FamilyOf(n.IP))})
	})
}

// NeighList lists the IPv4 and IPv6 neighbour entries (linkIndex 0: all
// links), whatever their state; other tables (bridge FDB) are left out.
func (h *Handle) NeighList(linkIndex int, family kernel.Family) (out []kernel.Neigh, err error) {
	err = h.use(func() error {
		ns, err := dump(func() ([]netlink.Neigh, error) { return h.nl.NeighList(linkIndex, int(family)) })
		for _, n := range ns {
			if n.IP == nil || (n.Family != unix.AF_INET && n.Family != unix.AF_INET6) {
				continue
			}
			out = append(out, kernel.Neigh{LinkIndex: n.LinkIndex, IP: n.IP, HardwareAddr: n.HardwareAddr, State: n.State})
		}
		return err
	})
	return out, err
}
