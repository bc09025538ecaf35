package model

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// normRoute fills what the kernel fills: main for table 0, the family, the
// default IPv6 metric.
func normRoute(r kernel.Route) (kernel.Route, error) {
	if r.Table == kernel.TableUnspec {
		r.Table = kernel.TableMain
	}
	switch {
	case r.Dst != nil:
		r.Family = familyOfNet(r.Dst)
		r.Dst = masked(r.Dst)
	case r.Gw != nil:
		r.Family = kernel.FamilyOf(r.Gw)
	case r.Family == kernel.FamilyAll:
		return r, fmt.Errorf("route without destination, gateway or family: %w", syscall.EINVAL)
	}
	if r.Gw != nil && r.Gw.To4() != nil {
		r.Gw = r.Gw.To4()
	}
	if r.Family == kernel.FamilyV6 && r.Priority == 0 {
		r.Priority = 1024
	}
	if r.Type == 0 {
		r.Type = kernel.RouteTypeUnicast
	}
	return r, nil
}

// findRoute returns the index of the route with the same key (table,
// family, destination, metric), or -1.
func (n *netns) findRoute(r kernel.Route) int {
	for i, e := range n.routes {
		if e.Table == r.Table && e.Family == r.Family && sameNet(e.Dst, r.Dst) && e.Priority == r.Priority {
			return i
		}
	}
	return -1
}

// checkRoute: the device must exist, and a gateway must be reachable on it
// (Linux's nexthop check: a link-scope route or an address prefix on the
// device covers it; IPv6 link-local gateways are always on-link).
func (n *netns) checkRoute(r kernel.Route) error {
	if _, ok := n.links[r.LinkIndex]; !ok {
		return noLink(fmt.Sprintf("index %d", r.LinkIndex))
	}
	if r.Gw == nil || (r.Family == kernel.FamilyV6 && r.Gw.IsLinkLocalUnicast()) {
		return nil
	}
	for _, e := range n.routes {
		if (e.Table == r.Table || e.Table == kernel.TableMain) && e.LinkIndex == r.LinkIndex && e.Gw == nil &&
			e.Dst != nil && e.Dst.Contains(r.Gw) && e.Type == kernel.RouteTypeUnicast {
			return nil
		}
	}
	return fmt.Errorf("gateway %s not reachable on ifindex %d: %w", r.Gw, r.LinkIndex, syscall.ENETUNREACH)
}

func (h *handle) RouteAdd(r kernel.Route) error { return h.addRoute(r, false) }

func (h *handle) RouteReplace(r kernel.Route) error { return h.addRoute(r, true) }

func (h *handle) addRoute(r kernel.Route, replace bool) error {
	r, err := normRoute(r)
	if err != nil {
		return err
	}
	return h.with(func(n *netns) error {
		if err := n.checkRoute(r); err != nil {
			return err
		}
		if i := n.findRoute(r); i >= 0 {
			if !replace {
				return fmt.Errorf("route %s table %d: %w", dstString(r), r.Table, syscall.EEXIST)
			}
			n.routes[i] = r
			return nil
		}
		n.routes = append(n.routes, r)
		return nil
	})
}

func dstString(r kernel.Route) string {
	if r.Dst == nil {
		return "default"
	}
	return r.Dst.String()
}

// RouteDel deletes the first route with the same table, family and
// destination that also matches the gateway, device, scope and metric
// given (zero values are wildcards, as in the kernel).
func (h *handle) RouteDel(r kernel.Route) error {
	r, err := normRoute(r)
	if err != nil {
		return err
	}
	given := r.Priority
	if r.Family == kernel.FamilyV6 && given == 1024 {
		given = 0 // the default metric normRoute filled in: a wildcard
	}
	return h.with(func(n *netns) error {
		for i, e := range n.routes {
			if e.Table != r.Table || e.Family != r.Family || !sameNet(e.Dst, r.Dst) {
				continue
			}
			if (r.Gw != nil && !r.Gw.Equal(e.Gw)) || (r.LinkIndex != 0 && r.LinkIndex != e.LinkIndex) ||
				(r.Scope != 0 && r.Scope != e.Scope) || (given != 0 && given != e.Priority) {
				continue
			}
			n.routes = append(n.routes[:i], n.routes[i+1:]...)
			return nil
		}
		return fmt.Errorf("route %s table %d: %w", dstString(r), r.Table, syscall.ESRCH)
	})
}

// RouteList lists the routes of a family (FamilyAll: both) in a table
// (0: every table, local included).
func (h *handle) RouteList(family kernel.Family, table int) (out []kernel.Route, err error) {
	err = h.with(func(n *netns) error {
		for _, r := range n.routes {
			if (family == kernel.FamilyAll || r.Family == family) && (table == 0 || r.Table == table) {
				c := r
				if c.Dst != nil {
					c.Dst = &net.IPNet{IP: c.Dst.IP, Mask: c.Dst.Mask}
				}
				out = append(out, c)
			}
		}
		return nil
	})
	return out, err
}
