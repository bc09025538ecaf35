package linux

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

// toNLRoute maps a route to netlink's. Table 0 is main. A route with
// neither destination nor gateway (a default route on a device) gets the
// /0 of its Family, which netlink needs to send it. For a delete, scope 0
// is sent as RT_SCOPE_NOWHERE, the kernel's "any scope" (netlink would
// otherwise send universe, and deleting a scope-link route without
// naming its scope would fail with ESRCH); protocol and type 0 are
// already wildcards.
func toNLRoute(r kernel.Route, del bool) (*netlink.Route, error) {
	nr := &netlink.Route{Table: r.Table, Dst: r.Dst, Gw: r.Gw, LinkIndex: r.LinkIndex, Scope: netlink.Scope(r.Scope),
		Src: r.Src, Priority: r.Priority, Protocol: netlink.RouteProtocol(r.Protocol), Type: r.Type}
	if nr.Table == kernel.TableUnspec {
		nr.Table = unix.RT_TABLE_MAIN
	}
	fam := r.Family
	switch {
	case r.Dst != nil && r.Dst.IP != nil:
		fam = kernel.FamilyOf(r.Dst.IP)
		if r.Gw != nil && kernel.FamilyOf(r.Gw) != fam {
			return nil, fmt.Errorf("route to %s via %s mixes families: %w", r.Dst, r.Gw, syscall.EINVAL)
		}
	case r.Gw != nil:
	case fam == kernel.FamilyV4:
		nr.Dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	case fam == kernel.FamilyV6:
		nr.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	default:
		return nil, fmt.Errorf("route without destination, gateway or family: %w", syscall.EINVAL)
	}
	if del && r.Scope == kernel.ScopeUniverse {
		nr.Scope = netlink.SCOPE_NOWHERE
	}
	return nr, nil
}

func fromNLRoute(r netlink.Route) kernel.Route {
	if r.Dst != nil {
		if ones, _ := r.Dst.Mask.Size(); ones == 0 && r.Dst.IP.IsUnspecified() {
			r.Dst = nil // netlink reports a default route as 0.0.0.0/0
		}
	}
	fam := kernel.Family(r.Family)
	if fam == kernel.FamilyAll {
		if r.Dst != nil {
			fam = kernel.FamilyOf(r.Dst.IP)
		} else if r.Gw != nil {
			fam = kernel.FamilyOf(r.Gw)
		}
	}
	return kernel.Route{Table: r.Table, Dst: r.Dst, Gw: r.Gw, LinkIndex: r.LinkIndex, Scope: kernel.Scope(r.Scope),
		Src: r.Src, Priority: r.Priority, Family: fam, Protocol: int(r.Protocol), Type: r.Type}
}

func (h *Handle) routeOp(r kernel.Route, del bool, op func(*netlink.Route) error) error {
	nr, err := toNLRoute(r, del)
	if err != nil {
		return err
	}
	return h.use(func() error { return op(nr) })
}

func (h *Handle) RouteAdd(r kernel.Route) error     { return h.routeOp(r, false, h.nl.RouteAdd) }
func (h *Handle) RouteReplace(r kernel.Route) error { return h.routeOp(r, false, h.nl.RouteReplace) }
func (h *Handle) RouteDel(r kernel.Route) error     { return h.routeOp(r, true, h.nl.RouteDel) }

// Route types the kernel makes by itself that kernel.Route does not model:
// broadcast and anycast entries of the local table, IPv6 multicast.
var hiddenTypes = map[int]bool{unix.RTN_BROADCAST: true, unix.RTN_ANYCAST: true, unix.RTN_MULTICAST: true}

// RouteList lists the routes of a family in one table (0: every table)
// with Table and Family filled in. Broadcast, anycast and multicast
// entries are left out (the model has none); local-table local routes
// are kept.
func (h *Handle) RouteList(family kernel.Family, table int) (out []kernel.Route, err error) {
	err = h.use(func() error {
		rs, err := dump(func() ([]netlink.Route, error) {
			if table == kernel.TableMain {
				// Without a filter netlink keeps main's routes and skips
				// the other tables' unparsed; with one it parses every
				// route of every table first (on a node of a hundred
				// pods, the local table's IPv6 entries of each veth).
				return h.nl.RouteListFiltered(int(family), &netlink.Route{}, 0)
			}
			return h.nl.RouteListFiltered(int(family), &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		})
		for _, r := range rs {
			if !hiddenTypes[r.Type] {
				out = append(out, fromNLRoute(r))
			}
		}
		return err
	})
	return out, err
}

// RouteListLink is RouteList of the routes leaving by one link. The
// kernel filters them when the request is strictly checked
// (NETLINK_GET_STRICT_CHK: the dump then honours its table and output
// link); an older kernel refuses the option and netlink filters here,
// after parsing the whole table. The option is the handle's, so the
// handle is held exclusively while it is on.
func (h *Handle) RouteListLink(family kernel.Family, table, linkIndex int) (out []kernel.Route, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("handle on %q is closed: %w", h.path, syscall.EBADF)
	}
	rs, err := h.linkDump(family, table, linkIndex, true)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOPROTOOPT) {
		// A kernel that cannot check this request strictly.
		rs, err = h.linkDump(family, table, linkIndex, false)
	}
	for _, r := range rs {
		if !hiddenTypes[r.Type] && r.LinkIndex == linkIndex {
			out = append(out, fromNLRoute(r))
		}
	}
	return out, err
}

// linkDump is the dump RouteListLink asks for, as the kernel answers it:
// table's routes, which, strictly checked, are only those leaving by
// linkIndex (RTA_OIF). The caller holds h.mu exclusively: strict checking
// is the handle's socket's.
func (h *Handle) linkDump(family kernel.Family, table, linkIndex int, strict bool) ([]netlink.Route, error) {
	filter := &netlink.Route{Table: table, LinkIndex: linkIndex}
	list := func() ([]netlink.Route, error) {
		// Only the table is filtered here: the output link is the
		// kernel's to filter (the request carries it either way).
		return h.nl.RouteListFiltered(int(family), filter, netlink.RT_FILTER_TABLE)
	}
	if !strict {
		return dump(list)
	}
	if err := h.nl.SetStrictCheck(true); err != nil {
		return nil, err
	}
	rs, err := dump(list)
	if serr := h.nl.SetStrictCheck(false); serr != nil {
		return nil, fmt.Errorf("netlink strict checking left on: %w", serr)
	}
	return rs, err
}

// RouteGet is `ip route get`: an input lookup when IifName is set (for
// IPv4 the kernel then wants a source, and forwarding on that link), else
// an output lookup. RulePrio is -1: the kernel does not say which rule
// chose the table.
func (h *Handle) RouteGet(q kernel.RouteQuery) (res kernel.RouteResult, err error) {
	if q.Dst == nil {
		return res, fmt.Errorf("route get without destination: %w", syscall.EINVAL)
	}
	if q.Src != nil && kernel.FamilyOf(q.Src) != kernel.FamilyOf(q.Dst) {
		return res, fmt.Errorf("route get from %s to %s mixes families: %w", q.Src, q.Dst, syscall.EINVAL)
	}
	err = h.use(func() error {
		rs, err := h.nl.RouteGetWithOptions(q.Dst, &netlink.RouteGetOptions{SrcAddr: q.Src, Iif: q.IifName, FIBMatch: q.FIBMatch})
		if err != nil {
			return notFound(err, q.IifName)
		}
		if len(rs) == 0 {
			return fmt.Errorf("no route to %s: %w", q.Dst, syscall.ENETUNREACH)
		}
		res = kernel.RouteResult{Table: rs[0].Table, LinkIndex: rs[0].LinkIndex, Gw: rs[0].Gw, RulePrio: -1}
		if q.FIBMatch {
			res.Route = fromNLRoute(rs[0])
		}
		if l, err := h.nl.LinkByIndex(rs[0].LinkIndex); err == nil {
			res.LinkName = l.Attrs().Name
		}
		return nil
	})
	return res, err
}
