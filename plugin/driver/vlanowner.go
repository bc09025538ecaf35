package driver

import (
	"fmt"
	"github.com/vpccni/vpccni/ownership"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// vlanHolder names another live pod that the branch VLAN's objects serve,
// "" when none does. A VLAN id is a branch ENI's and moves with it: a
// stale or forged prevResult may name the VLAN a neighbour now uses, and
// its link, table routes and iif rules must then stay. The kernel says
// who uses table vlan+100:
//   - strict mode: a host route `<IP> dev <veth>` in the table, or a prio-10
//     `iif <veth>` rule into it, for a live veth that is not ours;
//   - standard mode: a rule 1536 `from <IP> lookup <table>` for another IP
//     whose main-table route points at a live veth that is not ours.
func vlanHolder(host kernel.API, table int, ip netip.Addr, ourVeth int) (string, error) {
	links, err := host.LinkList()
	if err != nil {
		return "", err
	}
	live := map[int]string{}
	byName := map[string]bool{}
	for _, l := range links {
		live[l.Index] = l.Name
		byName[l.Name] = true
	}
	// A live link other than ours and other than a VLAN (the VLAN's own
	// gateway route points at it).
	other := func(idx int) (string, bool) {
		name, ok := live[idx]
		return name, ok && idx != ourVeth && idx != 0 && !isVlanLink(name)
	}
	routes, err := host.RouteList(kernel.FamilyAll, table)
	if err != nil {
		return "", err
	}
	for _, r := range routes {
		if a, ok := hostRouteAddr(r); ok && a != ip {
			if name, ok := other(r.LinkIndex); ok {
				return fmt.Sprintf("%s (route in table %d)", name, table), nil
			}
		}
	}
	rules, err := host.RuleList(kernel.FamilyAll)
	if err != nil {
		return "", err
	}
	ourName := live[ourVeth]
	main := map[netip.Addr]int{}
	if mr, err := host.RouteList(kernel.FamilyAll, kernel.TableMain); err == nil {
		for _, r := range mr {
			if a, ok := hostRouteAddr(r); ok {
				main[a] = r.LinkIndex
			}
		}
	}
	for _, r := range rules {
		if r.Table != table {
			continue
		}
		switch {
		case r.Priority == ownership.PrioVlanIIF && r.IifName != "" && !isVlanLink(r.IifName) && r.IifName != ourName && byName[r.IifName]:
			return fmt.Sprintf("%s (iif rule into table %d)", r.IifName, table), nil
		case r.Priority == ownership.PrioFromPod && r.Src != nil:
			if a, ok := netip.AddrFromSlice(r.Src.IP); ok && a.Unmap() != ip {
				if name, ok := other(main[a.Unmap()]); ok {
					return fmt.Sprintf("%s (rule 1536 from %s)", name, a.Unmap()), nil
				}
			}
		}
	}
	return "", nil
}

// hostRouteAddr is the address of a gateway-less host route (/32, /128).
func hostRouteAddr(r kernel.Route) (netip.Addr, bool) {
	if r.Dst == nil || r.Gw != nil {
		return netip.Addr{}, false
	}
	ones, bits := r.Dst.Mask.Size()
	if ones != bits {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	return a.Unmap(), ok
}

func isVlanLink(name string) bool {
	var id int
	_, err := fmt.Sscanf(name, "vlan.eth.%d", &id)
	return err == nil
}

// branchTie reports whether the kernel ties a branch pod's address to its
// VLAN table, so that the address's rules are the pod's to remove: a rule
// 1536 `from <a> lookup <table>` (standard mode), a route to a in the
// table (strict mode), or the main route to a pointing at this sandbox's
// veth. A forged source that names a VLAN and an address of somebody else
// finds none of these. (An iif rule of the pod's veth ties the pod to the
// VLAN, not an address: the VLAN's objects are torn down on their own
// terms, see teardownBranch.)
func branchTie(host kernel.API, a netip.Addr, table int, ourVeth int) (bool, error) {
	rules, err := host.RuleList(ownership.Family(a))
	if err != nil {
		return false, err
	}
	for _, r := range rules {
		if r.Table == table && ownership.IsFromPod(r, a) {
			return true, nil
		}
	}
	if r, err := routeIn(host, ownership.HostPrefix(a), table); err != nil || r != nil {
		return r != nil, err
	}
	if ourVeth == 0 {
		return false, nil
	}
	r, err := routeIn(host, ownership.HostPrefix(a), kernel.TableMain)
	return r != nil && r.LinkIndex == ourVeth, err
}
