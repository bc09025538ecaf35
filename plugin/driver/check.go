package driver

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vpccni/vpccni/ownership"

	"github.com/vpccni/vpccni/kernel"
)

// Check verifies that every object Setup makes for the pod is still there
// (CNI CHECK). It changes nothing and names each missing object, so an
// operator reading the runtime's error knows what to look for.
func (d *Driver) Check(host, pod kernel.API, p Pod) error {
	var missing []error
	miss := func(format string, a ...any) { missing = append(missing, fmt.Errorf(format, a...)) }
	cl, err := pod.LinkByName(p.ContainerIf)
	if err != nil {
		return fmt.Errorf("%s is missing in the pod namespace: %w", p.ContainerIf, err)
	}
	hl, err := host.LinkByName(p.HostVeth)
	if err != nil {
		return fmt.Errorf("host veth %s is missing: %w", p.HostVeth, err)
	}
	if cl.Kind != kernel.KindVeth || cl.ParentIndex != hl.Index {
		miss("%s is not the peer of host veth %s", p.ContainerIf, p.HostVeth)
	}
	if !cl.Up || !hl.Up {
		miss("%s or %s is down", p.ContainerIf, p.HostVeth)
	}
	rules, err := host.RuleList(kernel.FamilyAll)
	if err != nil {
		return err
	}
	has := func(m ruleMatcher) bool {
		for _, r := range rules {
			if m.match(r) {
				return true
			}
		}
		return false
	}
	for _, ip := range p.IPs {
		pfx := ip.Prefix()
		if err := checkPodSide(pod, cl, ip, hl); err != nil {
			missing = append(missing, err)
		}
		table := ip.Table
		if p.Branch != nil {
			table = p.Branch.Table()
			if _, err := host.LinkByName(p.Branch.VlanLink()); err != nil {
				miss("VLAN link %s is missing", p.Branch.VlanLink())
			}
		}
		if p.Branch != nil && p.Branch.Strict {
			for _, l := range []string{p.Branch.VlanLink(), p.HostVeth} {
				if !has(iifRuleMatcher(ownership.Family(ip.Addr), func(r kernel.Rule) bool { return r.IifName == l && r.Table == table })) {
					miss("rule %d iif %s lookup %d is missing", ownership.PrioVlanIIF, l, table)
				}
			}
			if r, _ := routeIn(host, pfx, table); r == nil || r.LinkIndex != hl.Index {
				miss("route %s dev %s in table %d is missing", pfx, p.HostVeth, table)
			}
			continue
		}
		if r, _ := routeIn(host, pfx, kernel.TableMain); r == nil || r.LinkIndex != hl.Index {
			miss("route %s dev %s in table main is missing", pfx, p.HostVeth)
		}
		if !has(toPodRuleMatcher(ip.Addr)) {
			miss("rule %d to %s lookup main is missing", ownership.PrioToPod, pfx)
		}
		if table == ownership.TableUnknown {
			// A source that did not record the table (a spec-format
			// result): the node says which it may be, as for a teardown.
			if err := checkUnknownTable(host, ip, has); err != nil {
				missing = append(missing, err)
			}
			continue
		}
		if table != kernel.TableMain && !has(fromPodRuleMatcher(ip.Addr, func(t int) bool { return t == table })) {
			miss("rule %d from %s lookup %d is missing", ownership.PrioFromPod, pfx, table)
		}
	}
	return errors.Join(missing...)
}

// checkUnknownTable checks an address's rule 1536 when the source does not
// say its table: the tables of the ENIs whose subnets hold the address
// are the candidates. On the primary ENI's subnet (table main) the pod
// needs none; elsewhere it needs one into a candidate table.
func checkUnknownTable(host kernel.API, ip PodIP, has func(ruleMatcher) bool) error {
	node, err := ownership.ReadNode(host)
	if err != nil {
		return err
	}
	tables, err := node.PodTables(ip.Addr)
	if err != nil {
		return fmt.Errorf("%s is not a pod address on this node: %w", ip.Addr, err)
	}
	if slices.Contains(tables, kernel.TableMain) || has(fromPodRuleMatcher(ip.Addr, func(t int) bool { return slices.Contains(tables, t) })) {
		return nil
	}
	return fmt.Errorf("rule %d from %s lookup %s is missing", ownership.PrioFromPod, ip.Prefix(), tableNames(tables))
}

// checkPodSide: the address, the gateway routes and the static neighbour.
func checkPodSide(pod kernel.API, cl kernel.Link, ip PodIP, hl kernel.Link) error {
	var missing []error
	addrs, err := pod.AddrList(cl.Index, ownership.Family(ip.Addr))
	if err != nil {
		return err
	}
	found := false
	for _, a := range addrs {
		found = found || samePrefix(a.IPNet, ip.Prefix())
	}
	if !found {
		missing = append(missing, fmt.Errorf("address %s is missing on %s", ip.Prefix(), cl.Name))
	}
	gw := gateway(ip.Addr)
	routes, err := pod.RouteList(ownership.Family(ip.Addr), kernel.TableMain)
	if err != nil {
		return err
	}
	var gwRoute, defRoute bool
	for _, r := range routes {
		gwRoute = gwRoute || (samePrefix(r.Dst, gwPrefix(gw)) && r.LinkIndex == cl.Index)
		defRoute = defRoute || (r.Dst == nil && r.Gw != nil && r.Gw.Equal(gw.AsSlice()) && r.LinkIndex == cl.Index)
	}
	if !gwRoute || !defRoute {
		missing = append(missing, fmt.Errorf("the pod's route to gateway %s or its default route is missing", gw))
	}
	neighs, err := pod.NeighList(cl.Index, ownership.Family(ip.Addr))
	if err != nil {
		return err
	}
	ok := false
	for _, n := range neighs {
		ok = ok || (n.IP.Equal(gw.AsSlice()) && n.HardwareAddr.String() == hl.HardwareAddr.String() && n.State&kernel.NeighStatePermanent != 0)
	}
	if !ok {
		missing = append(missing, fmt.Errorf("the pod's permanent neighbour %s -> %s is missing", gw, hl.HardwareAddr))
	}
	return errors.Join(missing...)
}
