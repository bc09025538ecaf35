package reconcile

import (
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/internal/naming"
	"github.com/vpccni/vpccni/kernel"
)

// view is what one pass read of the node namespace. It is read rules
// first, then links, then routes: the plugin makes a pod's link, then its
// host route, then its rules, so any pod rule in the view has its link and
// route in the view too, unless the pod went away in between.
type view struct {
	rules []kernel.Rule // in the kernel's order (priority, then age)
	links map[string]kernel.Link
	// hostRoutes maps a pod address to the link of its main-table host
	// route (<IP>/32 or /128 dev <link>), when that link exists.
	hostRoutes map[netip.Addr]kernel.Link
}

func readView(k kernel.API) (*view, error) {
	rules, err := k.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	v := &view{rules: rules}
	if v.links, err = linksByName(k); err != nil {
		return nil, err
	}
	if v.hostRoutes, err = mainHostRoutes(k, v.links); err != nil {
		return nil, err
	}
	return v, nil
}

func linksByName(k kernel.API) (map[string]kernel.Link, error) {
	ls, err := k.LinkList()
	if err != nil {
		return nil, err
	}
	out := make(map[string]kernel.Link, len(ls))
	for _, l := range ls {
		out[l.Name] = l
	}
	return out, nil
}

// mainHostRoutes collects the main table's host routes that point at an
// existing link, by address. Where one address has several (different
// metrics), the one Linux uses, the lowest metric, wins.
func mainHostRoutes(k kernel.API, links map[string]kernel.Link) (map[netip.Addr]kernel.Link, error) {
	routes, err := k.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, err
	}
	byIndex := make(map[int]kernel.Link, len(links))
	for _, l := range links {
		byIndex[l.Index] = l
	}
	out := map[netip.Addr]kernel.Link{}
	metric := map[netip.Addr]int{}
	for _, r := range routes {
		ip, ok := routeHostAddr(r)
		l, exists := byIndex[r.LinkIndex]
		if !ok || !exists {
			continue
		}
		if m, seen := metric[ip]; seen && m <= r.Priority {
			continue
		}
		out[ip], metric[ip] = l, r.Priority
	}
	return out, nil
}

// routeHostAddr is the address of a main-table, gateway-less host route
// (what the pod path makes: <IP>/32 dev <host veth> scope link).
func routeHostAddr(r kernel.Route) (netip.Addr, bool) {
	if r.Table != kernel.TableMain || r.Gw != nil || r.Dst == nil || r.Type == kernel.RouteTypeLocal {
		return netip.Addr{}, false
	}
	return hostAddr(r.Dst, r.Family)
}

// podAlive reports whether the kernel shows the holder's pod using the
// holder's address: a link named for the pod (for a pod known by name, a
// link whose name ends with its name hash, whatever the prefix: eni, vlan,
// a custom vethPrefix; for an allocation recovered from the kernel, its
// host veth) to which the main table routes the address. A link of the
// pod without that route is the same pod in a new sandbox with another
// address (its earlier ADD failed after ipamd assigned this one): the
// allocation is not in use. known is false when the holder names neither,
// and then nothing can be concluded.
func (v *view) podAlive(h Holder) (alive, known bool) {
	routed, hasRoute := v.hostRoutes[h.IP]
	switch {
	case h.PodNamespace != "" && h.PodName != "":
		return hasRoute && naming.HasPodSuffix(routed.Name, h.PodNamespace, h.PodName), true
	case h.HostVeth != "":
		return hasRoute && routed.Name == h.HostVeth, true
	}
	return false, false
}

// forget drops a rule the pass deleted (or found gone) from the view.
func (v *view) forget(r kernel.Rule) {
	for i, e := range v.rules {
		if sameRule(e, r) {
			v.rules = append(v.rules[:i], v.rules[i+1:]...)
			return
		}
	}
}

// shadowedBy answers: would RuleDel(r) delete r? The kernel deletes the
// first rule, in list order, that matches every field the request sets;
// fields a request leaves empty (no iif, no src, no mark) are wildcards.
// So a foreign rule with the same priority, prefix and table plus an extra
// selector, listed before ours, would be deleted in its place. It returns
// that rule when there is one.
func (v *view) shadowedBy(r kernel.Rule) (kernel.Rule, bool) {
	for _, e := range v.rules {
		if e.Family != r.Family || !delRequestMatches(r, e) {
			continue
		}
		if sameRule(e, r) {
			return kernel.Rule{}, false
		}
		return e, true
	}
	return kernel.Rule{}, false
}

// delRequestMatches is the kernel's rule lookup for a delete request q:
// zero fields of q match anything.
func delRequestMatches(q, e kernel.Rule) bool {
	return (q.Priority == 0 || e.Priority == q.Priority) && (q.Table == 0 || e.Table == q.Table) &&
		(q.Src == nil || sameNet(e.Src, q.Src)) && (q.Dst == nil || sameNet(e.Dst, q.Dst)) &&
		(q.IifName == "" || e.IifName == q.IifName) && (q.OifName == "" || e.OifName == q.OifName) &&
		(q.Mark == 0 || e.Mark == q.Mark) && (q.Mask == 0 || e.Mask == q.Mask)
}

// sameRule compares every field a rule shows.
func sameRule(a, b kernel.Rule) bool {
	return a.Priority == b.Priority && a.Family == b.Family && a.Table == b.Table &&
		sameNet(a.Src, b.Src) && sameNet(a.Dst, b.Dst) && a.IifName == b.IifName &&
		a.OifName == b.OifName && a.Mark == b.Mark && a.Mask == b.Mask
}

// sameNet compares prefixes whatever the byte form of their addresses.
func sameNet(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ao, ab := a.Mask.Size()
	bo, bb := b.Mask.Size()
	pa, oka := netip.AddrFromSlice(a.IP)
	pb, okb := netip.AddrFromSlice(b.IP)
	if ab != bb {
		// One side may be an IPv4 address in its 16-byte form.
		return oka && okb && ao-ab == bo-bb && pa.Unmap() == pb.Unmap()
	}
	return oka && okb && ao == bo && pa.Unmap() == pb.Unmap()
}
