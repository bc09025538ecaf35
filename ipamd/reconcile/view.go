package reconcile

import (
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// view is what one pass read of the node namespace. It is read rules
// first, then links, then routes: the plugin makes a pod's link, then its
// host route, then its rules, so any pod rule in the view has its link and
// route in the view too, unless the pod went away in between.
type view struct {
	rules []kernel.Rule // in the kernel's order (priority, then age)
	// node is the node's ENIs: which addresses and tables are pods'.
	node  *ownership.Node
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
	if v.node, err = ownership.ReadNode(k); err != nil {
		return nil, err
	}
	if v.links, err = linksByName(k); err != nil {
		return nil, err
	}
	if v.hostRoutes, err = mainHostRoutes(k, v.links); err != nil {
		return nil, err
	}
	return v, nil
}

// scope is the node's and the pool's word on which rules are pods'.
func (v *view) scope(p Pool) ownership.Scope {
	return ownership.Scope{Node: v.node, InPool: p.IsPodAddress}
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
	return ownership.HostAddr(r.Dst, r.Family)
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
		return hasRoute && ownership.HasPodSuffix(routed.Name, h.PodNamespace, h.PodName), true
	case h.HostVeth != "":
		return hasRoute && routed.Name == h.HostVeth && (h.HostVethIndex == 0 || routed.Index == h.HostVethIndex), true
	}
	return false, false
}

// forget drops a rule the pass deleted (or found gone) from the view.
func (v *view) forget(r kernel.Rule) {
	if i := ownership.IndexOf(v.rules, r); i >= 0 {
		v.rules = append(v.rules[:i], v.rules[i+1:]...)
	}
}

// shadowedBy answers: would RuleDel(r) delete r, and only r? It is
// ownership.ShadowedBy on what this pass still sees: a foreign rule listed
// before r that the request matches, or one anywhere that reads the same,
// keeps r in place.
func (v *view) shadowedBy(r kernel.Rule) (kernel.Rule, string, bool) {
	i := ownership.IndexOf(v.rules, r)
	if i < 0 {
		return kernel.Rule{}, "", false
	}
	return ownership.ShadowedBy(v.rules, nil, i)
}
