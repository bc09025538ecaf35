package model

import (
	"fmt"
	"sort"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// normRoute fills in what the kernel and netlink fill in. For an add:
// table 0 is main, an IPv6 metric 0 is 1024, protocol 0 is boot (what
// netlink sends), type 0 unicast, IPv6 scope universe (the kernel keeps
// none). For a delete zero fields stay zero: they are wildcards.
func normRoute(r kernel.Route, del bool) (kernel.Route, error) {
	r = copyRoute(r)
	if r.Table == kernel.TableUnspec {
		r.Table = kernel.TableMain
	}
	if isUnspecified(r.Gw) {
		r.Gw = nil
	}
	if isUnspecified(r.Src) {
		r.Src = nil
	}
	switch {
	case r.Dst != nil && r.Dst.IP != nil:
		r.Family = familyOfNet(r.Dst)
		if r.Gw != nil && kernel.FamilyOf(r.Gw) != r.Family {
			return r, fmt.Errorf("route to %s via %s mixes families: %w", r.Dst, r.Gw, syscall.EINVAL)
		}
	case r.Gw != nil:
		r.Family = kernel.FamilyOf(r.Gw)
	case r.Family != kernel.FamilyV4 && r.Family != kernel.FamilyV6:
		return r, fmt.Errorf("route without destination, gateway or family: %w", syscall.EINVAL)
	}
	if r.Dst != nil && r.Dst.IP != nil && hasHostBits(r.Dst) {
		if r.Family == kernel.FamilyV4 {
			return r, fmt.Errorf("route to %s: host bits set: %w", r.Dst, syscall.EINVAL)
		}
		r.Dst = masked(r.Dst)
	}
	r.Dst = defaultNet(r.Dst)
	if del {
		return r, nil
	}
	if r.Family == kernel.FamilyV6 {
		r.Scope = kernel.ScopeUniverse
		if r.Priority == 0 {
			r.Priority = 1024
		}
	}
	if r.Protocol == 0 {
		r.Protocol = protoBoot
	}
	if r.Type == 0 {
		r.Type = kernel.RouteTypeUnicast
	}
	return r, nil
}

// checkNexthop4 is fib_check_nh for IPv4. A gateway must be reachable by
// a route of at least link scope (in the route's table, else through the
// rules), on the given device if there is one; the device, found that way
// when not given, must be up (ENETDOWN). Without a gateway the device must
// exist (ENODEV) and, unless the route is host scope, be up. A preferred
// source must be local (EINVAL; see localAddr4). hostGw: the gateway
// resolved through a host-scope route (see route).
func (n *netns) checkNexthop4(r *kernel.Route) (hostGw bool, err error) {
	if r.Gw != nil {
		if r.Scope >= kernel.ScopeHost {
			return false, fmt.Errorf("host-scope route with a gateway: %w", syscall.EINVAL)
		}
		fl := flow{dst: r.Gw, iif: loIndex, oif: r.LinkIndex, minScope: max(r.Scope+1, kernel.ScopeLink)}
		var via route
		found := false
		if r.Table != kernel.TableMain && n.tables[table{kernel.FamilyV4, r.Table}] {
			via, found = n.tableLookup(r.Table, kernel.FamilyV4, fl)
		}
		if !found {
			via, _, found = n.policyLookup(kernel.FamilyV4, fl)
		}
		if !found {
			return false, fmt.Errorf("gateway %s unreachable: %w", r.Gw, syscall.ENETUNREACH)
		}
		if via.Type != kernel.RouteTypeUnicast && via.Type != kernel.RouteTypeLocal {
			return false, fmt.Errorf("gateway %s: %w", r.Gw, syscall.EINVAL)
		}
		r.LinkIndex, hostGw = via.LinkIndex, via.Scope == kernel.ScopeHost
		if l, ok := n.links[r.LinkIndex]; !ok || !l.Up {
			return false, fmt.Errorf("gateway %s: device for nexthop is not up: %w", r.Gw, syscall.ENETDOWN)
		}
	} else {
		l, ok := n.links[r.LinkIndex]
		if !ok {
			return false, noIndex(r.LinkIndex)
		}
		if !l.Up && r.Scope != kernel.ScopeHost {
			return false, fmt.Errorf("device %s for nexthop is not up: %w", l.Name, syscall.ENETDOWN)
		}
	}
	if r.Src != nil && !(r.Type == kernel.RouteTypeLocal && r.Dst != nil && r.Src.Equal(r.Dst.IP)) && !n.localAddr4(r.Src) {
		return false, fmt.Errorf("preferred source %s is not local: %w", r.Src, syscall.EINVAL)
	}
	return hostGw, nil
}

// checkNexthop6 is fib6_nh_init and ip6_validate_gw: ENODEV for a missing
// device; a gateway may not be a local address (EINVAL); a link-local
// gateway needs a device (EINVAL); any other must be on-link through a
// route without gateway, on the given device (EHOSTUNREACH); the device
// may not be lo (EINVAL), must have IPv6 (EACCES) and be up (ENETDOWN).
func (n *netns) checkNexthop6(r *kernel.Route) error {
	if _, ok := n.links[r.LinkIndex]; r.LinkIndex != 0 && !ok {
		return noIndex(r.LinkIndex)
	}
	if r.Gw != nil {
		if n.hasLocal(r.Gw) {
			return fmt.Errorf("gateway %s is a local address: %w", r.Gw, syscall.EINVAL)
		}
		if !r.Gw.IsLinkLocalUnicast() {
			fl := flow{dst: r.Gw, oif: r.LinkIndex}
			via, found := route{}, false
			if n.tables[table{kernel.FamilyV6, r.Table}] {
				via, found = n.tableLookup(r.Table, kernel.FamilyV6, fl)
				found = found && via.Gw == nil
			}
			if !found {
				via, _, found = n.policyLookup(kernel.FamilyV6, fl)
				found = found && via.Gw == nil
			}
			// A route on lo does not make a gateway on-link (measured).
			if !found || (r.LinkIndex != 0 && via.LinkIndex != r.LinkIndex) || via.LinkIndex == loIndex {
				return fmt.Errorf("gateway %s not on-link: %w", r.Gw, syscall.EHOSTUNREACH)
			}
			r.LinkIndex = via.LinkIndex
		}
		if r.LinkIndex == 0 {
			return fmt.Errorf("gateway %s: egress device not specified: %w", r.Gw, syscall.EINVAL)
		}
		if n.links[r.LinkIndex].Kind == kernel.KindLoopback {
			return fmt.Errorf("gateway %s: egress device can not be lo: %w", r.Gw, syscall.EINVAL)
		}
	}
	l, ok := n.links[r.LinkIndex]
	if !ok {
		return noIndex(r.LinkIndex)
	}
	if n.ipv6Disabled(l.Name) {
		return fmt.Errorf("IPv6 is disabled on %s: %w", l.Name, syscall.EACCES)
	}
	if !l.Up {
		return fmt.Errorf("nexthop device %s is not up: %w", l.Name, syscall.ENETDOWN)
	}
	if r.Src != nil && !n.hasLocal(r.Src) {
		return fmt.Errorf("preferred source %s is not local: %w", r.Src, syscall.EINVAL)
	}
	return nil
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

// RouteAdd adds a route: the checks above, then EEXIST for a route with
// the same table, destination and metric.
func (h *handle) RouteAdd(r kernel.Route) error { return h.addRoute(r, false) }

// RouteReplace replaces the route with the same table, destination and
// metric, or adds it.
func (h *handle) RouteReplace(r kernel.Route) error { return h.addRoute(r, true) }

func (h *handle) addRoute(r kernel.Route, replace bool) error {
	r, err := normRoute(r, false)
	if err != nil {
		return err
	}
	return h.change(func(n *netns) error {
		n.tables[table{r.Family, r.Table}] = true // Linux creates the table before it checks the route
		hostGw := false
		if r.Family == kernel.FamilyV4 {
			hostGw, err = n.checkNexthop4(&r)
		} else {
			err = n.checkNexthop6(&r)
		}
		if err != nil {
			return err
		}
		if i := n.findRoute(r); i >= 0 {
			if !replace {
				return fmt.Errorf("route %s table %s: %w", dstString(r), kernel.TableString(r.Table), syscall.EEXIST)
			}
			n.routes[i] = route{r, hostGw}
			return nil
		}
		n.routes = append(n.routes, route{r, hostGw})
		return nil
	})
}

func dstString(r kernel.Route) string {
	if r.Dst == nil {
		return "default"
	}
	return r.Dst.String()
}

// RouteDel deletes the first route, lowest metric first, with the table,
// family and destination given that also matches every other field set
// (zero fields are wildcards): for IPv4 gateway, device, scope, preferred
// source, metric, protocol and type, as fib_table_delete; for IPv6
// gateway, device, metric and protocol, as ip6_route_del. ESRCH when none
// (or when the table does not exist); for the IPv6 default route of a
// table that has none, ENOENT (see nullEntryMatches).
func (h *handle) RouteDel(r kernel.Route) error {
	r, err := normRoute(r, true)
	if err != nil {
		return err
	}
	return h.change(func(n *netns) error {
		var cand []int
		for i, e := range n.routes {
			if e.Table == r.Table && e.Family == r.Family && sameNet(e.Dst, r.Dst) {
				cand = append(cand, i)
			}
		}
		sort.SliceStable(cand, func(a, b int) bool { return n.routes[cand[a]].Priority < n.routes[cand[b]].Priority })
		v4 := r.Family == kernel.FamilyV4
		for _, i := range cand {
			e := n.routes[i]
			if (r.Gw != nil && !r.Gw.Equal(e.Gw)) || (r.LinkIndex != 0 && r.LinkIndex != e.LinkIndex) ||
				(r.Priority != 0 && r.Priority != e.Priority) || (r.Protocol != 0 && r.Protocol != e.Protocol) {
				continue
			}
			if v4 && ((r.Scope != 0 && r.Scope != e.Scope) || (r.Src != nil && !r.Src.Equal(e.Src)) || (r.Type != 0 && r.Type != e.Type)) {
				continue
			}
			n.routes = append(n.routes[:i], n.routes[i+1:]...)
			return nil
		}
		if !v4 && r.Dst == nil && len(cand) == 0 && n.tables[table{r.Family, r.Table}] && nullEntryMatches(r) {
			// ip6_route_del finds the table's root node, which holds only
			// the null entry when there is no default route, and refuses
			// to delete that entry with ENOENT.
			return fmt.Errorf("no IPv6 default route in table %s: %w", kernel.TableString(r.Table), syscall.ENOENT)
		}
		return fmt.Errorf("route %s table %s: %w", dstString(r), kernel.TableString(r.Table), syscall.ESRCH)
	})
}

// nullEntryMatches: the IPv6 null entry (device lo, no gateway, metric
// 0xffffffff, proto kernel) passes ip6_route_del's filters.
func nullEntryMatches(r kernel.Route) bool {
	return (r.LinkIndex == 0 || r.LinkIndex == loIndex) && r.Gw == nil && (r.Priority == 0 || uint32(r.Priority) == 0xffffffff) &&
		(r.Protocol == 0 || r.Protocol == protoKernel)
}

// RouteList lists the routes of a family (FamilyAll: both, IPv4 first) in
// a table (0: every table, local included), by table then age.
func (h *handle) RouteList(family kernel.Family, table int) (out []kernel.Route, err error) {
	err = h.with(func(n *netns) error {
		var c copier
		for _, r := range n.routes {
			if (family == kernel.FamilyAll || r.Family == family) && (table == 0 || r.Table == table) {
				out = append(out, c.route(r.Route))
			}
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Family != out[j].Family {
			return out[i].Family < out[j].Family
		}
		return out[i].Table < out[j].Table
	})
	return out, err
}

// RouteListLink is RouteList of the routes whose output link is linkIndex.
func (h *handle) RouteListLink(family kernel.Family, table, linkIndex int) ([]kernel.Route, error) {
	all, err := h.RouteList(family, table)
	var out []kernel.Route
	for _, r := range all {
		if r.LinkIndex == linkIndex {
			out = append(out, r)
		}
	}
	return out, err
}
