package driver

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// Teardown steps (see Setup for why they are named).
const (
	StepFindOwnVeth  = "find-own-veth"
	StepCheckHolder  = "check-holder"
	StepDelRuleToPod = "del-rule-to-pod"
	StepDelRuleFrom  = "del-rule-from-pod"
	StepDelHostRoute = "del-host-route"
	StepDelPodVeth   = "del-pod-veth"
)

// NotPodAddressError says that the teardown source named an address the
// node does not show to be a pod's (or, for a branch pod, that nothing on
// the node ties the address to the VLAN it named), while the kernel has
// objects for that address at the pod path's priorities: they are somebody
// else's as far as anyone can prove, and were left alone.
type NotPodAddressError struct {
	Addr   netip.Addr
	Reason string
}

func (e *NotPodAddressError) Error() string {
	return fmt.Sprintf("refusing to tear down %s: %s; its rules and routes are left alone", e.Addr, e.Reason)
}

// Teardown removes the pod's objects, but only those still this pod's.
//
// What is a pod's is decided by the node, not by the source (a prevResult,
// ipamd's reply, the pod namespace): an address is torn down only if it
// lies in the subnet of one of the node's ENIs and is not an address the
// node itself carries, and its 1536 rules only in the tables of those ENIs
// (ownership.Node), whatever table the source claims: the claim is
// evidence, and a disagreement is logged, not obeyed. A branch pod's
// address must be tied to its VLAN by the kernel (a rule, a route or the
// pod's own veth).
//
// Rules are keyed by IP and an IP moves on, so before touching an IP's
// rules the driver asks the kernel who holds it: the main-table host route
// for the IP points at the holder's host veth. Our host veth is the peer
// of our container interface (found through the pod namespace, not by
// name: a pod recreated with the same name has a veth of the same name).
// If the route points at any other link, the IP and its rules belong to
// someone else now and are left alone; if it points at ours, or there is
// no route (our veth went with the namespace), they are ours.
//
// Every step runs even if an earlier one failed, so one failure leaves as
// little as possible, except what proves the rest, which goes last and
// only once the rest is gone: the pod's interface, then the host routes.
// The joined error makes the runtime retry.
func (d *Driver) Teardown(host, pod kernel.API, p Pod) (Report, error) {
	var rep Report
	ourVeth := 0
	if pod != nil {
		if err := d.step(StepFindOwnVeth, p.ContainerIf, func() error {
			var err error
			ourVeth, err = ownership.SandboxVeth(pod, p.ContainerIf)
			return err
		}); err != nil {
			return rep, err
		}
	}
	view := p.Node
	if !view.covers(p) {
		var err error
		if view, err = d.ReadNode(host, podAddrs(p)); err != nil {
			return rep, err
		}
	}
	node, rules := view.node, view.rules
	var err error
	// Decide for every address before touching any: a source that names
	// one address the node does not show to be this pod's is refused as a
	// whole, and nothing of the others is torn down either.
	tables := make([][]int, len(p.IPs))
	for i, ip := range p.IPs {
		if tables[i], err = d.plan(host, node, rules, p, ip, ourVeth, &rep); err != nil {
			return rep, err
		}
	}
	var errs []error
	var routes []kernel.Route // host routes, to go after the pod's interface
	for i, ip := range p.IPs {
		switch {
		case p.Branch != nil:
			// The VLAN's own objects go whether or not the address is
			// tied to it (see teardownBranch).
			err = d.teardownBranch(host, ip, p.Branch, ourVeth, tables[i] != nil, &rep)
		case tables[i] == nil:
			continue // nothing of it on the node
		default:
			var route *kernel.Route
			if route, err = d.teardownIP(host, rules, ip, tables[i], ourVeth, &rep); route != nil {
				routes = append(routes, *route)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	// What proves the rest goes last: the pod's interface is what a retry
	// reads the pod's addresses from (its prevResult may be untrustworthy,
	// ipamd away), and a host route is what shows ipamd's reconciler that
	// the address is still this veth's (it would free it otherwise, with
	// whatever is left of the pod). Deleting the interface takes its routes
	// with it; those of a namespace already gone are deleted here.
	if len(errs) > 0 {
		if pod != nil {
			rep.note("kept %s: the node side is not all gone, and the retry reads the pod's addresses from it", p.ContainerIf)
		}
		for _, r := range routes {
			rep.note("kept route %s (main): the rest of its pod is not all gone", r.Dst)
		}
	} else {
		vethGone := false
		if pod != nil && p.LeaveVeth && p.Branch == nil {
			rep.note("left %s and its peer %s for ipamd to delete before it releases the address", p.ContainerIf, p.HostVeth)
		} else if pod != nil {
			if err := d.step(StepDelPodVeth, p.ContainerIf, func() error {
				err := pod.LinkDel(p.ContainerIf)
				if err == nil {
					vethGone = true
					rep.removed("link %s (pod) and its peer %s", p.ContainerIf, p.HostVeth)
				}
				return ignoreNotFound(err)
			}); err != nil {
				errs = append(errs, err)
			}
		}
		for _, r := range routes {
			if len(errs) > 0 {
				rep.note("kept route %s (main): %s is left", r.Dst, p.ContainerIf)
				continue
			}
			if err := d.step(StepDelHostRoute, r.Dst.String(), func() error {
				err := host.RouteDel(r)
				switch {
				case err == nil:
					rep.removed("route %s (main)", r.Dst)
				case vethGone && kernel.IsNotFound(err):
					rep.removed("route %s (main), with the veth", r.Dst)
				}
				return ignoreNotFound(err)
			}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	err = errors.Join(errs...)
	d.log.Debug("pod network torn down", "hostVeth", p.HostVeth, "removed", rep.Removed, "skipped", rep.Skipped, "notes", rep.Notes, "error", err)
	return rep, err
}

// plan decides, from the node, which tables the address's rules may be
// in. It refuses (NotPodAddressError) an address the node does not show to
// be this pod's while the kernel has objects for it, and returns no tables
// when there is nothing of it to tear down.
func (d *Driver) plan(host kernel.API, node *ownership.Node, rules *ruleView, p Pod, ip PodIP, ourVeth int, rep *Report) ([]int, error) {
	if p.Branch != nil && !ownership.ValidVlan(p.Branch.VlanID) {
		return nil, &NotPodAddressError{Addr: ip.Addr, Reason: fmt.Sprintf("VLAN %d is not a branch ENI's", p.Branch.VlanID)}
	}
	tables, why := d.podTables(host, node, p, ip, ourVeth)
	if why != "" {
		leftover, err := hasObjects(host, rules, ip.Addr)
		if err != nil {
			return nil, err
		}
		if leftover {
			return nil, &NotPodAddressError{Addr: ip.Addr, Reason: why}
		}
		rep.note("%s: nothing of it on the node (%s)", ip.Addr, why)
		return nil, nil
	}
	if ip.Table != ownership.TableUnknown && !slices.Contains(tables, ip.Table) {
		rep.note("the source names table %s for %s; the node says %s: tearing down there",
			ownership.TableName(ip.Table), ip.Addr, tableNames(tables))
		d.log.Warn("teardown source disagrees with the node about the table; the node wins",
			"ip", ip.Addr, "sourceTable", ip.Table, "nodeTables", tables)
	}
	return tables, nil
}

// podTables is the tables the address's 1536 rules may be in, or why the
// node does not show it as this pod's.
func (d *Driver) podTables(host kernel.API, node *ownership.Node, p Pod, ip PodIP, ourVeth int) ([]int, string) {
	if p.Branch == nil {
		tables, err := node.PodTables(ip.Addr)
		if err != nil {
			return nil, err.Error()
		}
		return tables, ""
	}
	if node.IsOwnAddress(ip.Addr) || !ownership.ValidPodAddr(ip.Addr) {
		return nil, fmt.Sprintf("%s is the node's own address or no pod's", ip.Addr)
	}
	tied, err := branchTie(host, ip.Addr, p.Branch.Table(), ourVeth)
	if err != nil {
		return nil, err.Error()
	}
	if !tied {
		return nil, fmt.Sprintf("nothing on the node ties %s to VLAN %d (no rule 1536 from it into table %d, no route to it there, no main route to this sandbox's veth)",
			ip.Addr, p.Branch.VlanID, p.Branch.Table())
	}
	return []int{p.Branch.Table()}, ""
}

// teardownIP removes an address's rules, once the kernel shows the
// address is still this sandbox's, and returns its host route for Teardown
// to delete last (nil: none, or the address is another veth's now).
func (d *Driver) teardownIP(host kernel.API, rules *ruleView, ip PodIP, tables []int, ourVeth int, rep *Report) (*kernel.Route, error) {
	pfx := ip.Prefix()
	var route *kernel.Route
	if err := d.step(StepCheckHolder, pfx.String(), func() error {
		var err error
		route, err = holderRoute(host, pfx)
		return err
	}); err != nil {
		return nil, err
	}
	if route != nil && route.LinkIndex != ourVeth {
		holder := fmt.Sprintf("ifindex %d", route.LinkIndex)
		if l, err := host.LinkByIndex(route.LinkIndex); err == nil {
			holder = l.Name
		}
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: now routed to %s", pfx, holder))
		rep.Moved = append(rep.Moved, ip.Addr)
		d.log.Info("IP has a new holder, leaving its rules alone", "ip", pfx, "holder", holder)
		return nil, nil
	}
	return route, d.teardownIPRules(host, rules, ip.Addr, tables, rep)
}

// holderRoute is main's route for exactly the pod's host prefix, if any:
// the kernel's own lookup first (one request, where a listing parses every
// pod's host route), the listing when the lookup cannot tell. The lookup
// answers only when it lands on a unicast entry for exactly the prefix in
// main; anything else (a less specific route: the veth went with the
// namespace; another table, through a rule before 512; no route at all)
// leaves the question to routeIn, which sees every route of main.
func holderRoute(host kernel.API, pfx netip.Prefix) (*kernel.Route, error) {
	res, err := host.RouteGet(kernel.RouteQuery{Dst: pfx.Addr().AsSlice(), FIBMatch: true})
	if r := res.Route; err == nil && r.Table == kernel.TableMain && samePrefix(r.Dst, pfx) &&
		(r.Type == 0 || r.Type == kernel.RouteTypeUnicast) {
		return &r, nil
	}
	return routeIn(host, pfx, kernel.TableMain)
}

// teardownIPRules removes the address's own 512 rule and its 1536 rules in
// the given tables (the caller has decided the tables and checked the
// holder).
func (d *Driver) teardownIPRules(host kernel.API, rules *ruleView, a netip.Addr, tables []int, rep *Report) error {
	pfx := ownership.HostPrefix(a)
	var errs []error
	if err := d.step(StepDelRuleToPod, pfx.String(), func() error {
		gone, err := deleteRules(host, rules, toPodRuleMatcher(a))
		for range gone {
			rep.removed("rule %d to %s lookup main", ownership.PrioToPod, pfx)
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	if !slices.ContainsFunc(tables, func(t int) bool { return t != kernel.TableMain }) {
		return errors.Join(errs...)
	}
	if err := d.step(StepDelRuleFrom, pfx.String(), func() error {
		gone, err := deleteRules(host, rules, fromPodRuleMatcher(a, func(t int) bool { return slices.Contains(tables, t) }))
		for _, r := range gone {
			rep.removed("rule %d from %s lookup %s", ownership.PrioFromPod, pfx, ownership.TableName(r.Table))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// hasObjects reports whether the kernel shows a pod-path object for the
// address: a 512 or 1536 rule of its exact shape, or a main-table route to
// exactly it.
func hasObjects(host kernel.API, v *ruleView, a netip.Addr) (bool, error) {
	if !v.Covers(ownership.Family(a)) {
		var err error
		if v, err = listRules(host, ownership.Family(a)); err != nil {
			return false, err
		}
	}
	for _, r := range v.Remaining() {
		if ownership.IsToPod(r, a) || ownership.IsFromPod(r, a) {
			return true, nil
		}
	}
	route, err := routeIn(host, ownership.HostPrefix(a), kernel.TableMain)
	return route != nil, err
}

// NodeView is what a teardown decides from on the node (ReadNode).
type NodeView struct {
	addrs []netip.Addr
	// rules is one dump of the rules of the addresses' family, shared by
	// the node's reading and every delete (ruleView).
	rules *ruleView
	// node is, of the node, only what answers for the addresses.
	node *ownership.Node
}

// ReadNode reads the node for a teardown of a pod with these addresses.
func (d *Driver) ReadNode(host kernel.API, addrs []netip.Addr) (*NodeView, error) {
	rules, err := listRules(host, ownership.FamilyOfAll(addrs))
	if err != nil {
		return nil, err
	}
	node, err := ownership.ReadNodeFor(host, rules.Listed(), addrs)
	if err != nil {
		return nil, err
	}
	return &NodeView{addrs: slices.Clone(addrs), rules: rules, node: node}, nil
}

// covers: the view was read for every address of the pod.
func (v *NodeView) covers(p Pod) bool {
	return v != nil && !slices.ContainsFunc(p.IPs, func(ip PodIP) bool { return !slices.Contains(v.addrs, ip.Addr) }) &&
		v.rules.Covers(podFamily(p))
}

func podAddrs(p Pod) []netip.Addr {
	out := make([]netip.Addr, len(p.IPs))
	for i, ip := range p.IPs {
		out[i] = ip.Addr
	}
	return out
}

func podIPs(addrs []netip.Addr) []PodIP {
	out := make([]PodIP, len(addrs))
	for i, a := range addrs {
		out[i] = PodIP{Addr: a}
	}
	return out
}

// podFamily is the family of the pod's addresses, FamilyAll when it has
// both or none.
func podFamily(p Pod) kernel.Family { return ownership.FamilyOfAll(podAddrs(p)) }

func tableNames(ts []int) string {
	s := ""
	for i, t := range ts {
		if i > 0 {
			s += " or "
		}
		s += ownership.TableName(t)
	}
	return s
}
