package driver

import (
	"errors"
	"fmt"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// Branch-ENI steps.
const (
	StepDelOldIIFRules = "del-old-iif-rules"
	StepVlanLink       = "vlan-link"
	StepVlanRoutes     = "vlan-routes"
	StepVlanPodRoute   = "vlan-pod-route"
	StepRuleIIFVlan    = "rule-iif-vlan"
	StepRuleIIFVeth    = "rule-iif-veth"
	StepDelVlanLink    = "del-vlan-link"
	StepDelIIFRules    = "del-iif-rules"
)

// setupBranchHost makes the node side of a branch-ENI pod
// (docs/reference-facts.md#branch-eni-pod): the VLAN link on the trunk, the VLAN table with its gateway and
// default route, and then either strict mode's prio-10 iif rules (the
// pod's traffic only ever uses the branch ENI) or standard mode's 512/1536
// rules with the VLAN table.
func (d *Driver) setupBranchHost(host kernel.API, hostVeth string, hostIdx int, ip PodIP, b *Branch) error {
	fam := ownership.Family(ip.Addr)
	table := b.Table()
	// A pod recreated with the same name (#1374) finds the old sandbox's
	// iif rules for the same host veth name, possibly for another VLAN.
	if err := d.step(StepDelOldIIFRules, hostVeth, func() error {
		_, err := deleteRules(host, nil, iifRuleMatcher(fam, func(r kernel.Rule) bool { return r.IifName == hostVeth }))
		return err
	}); err != nil {
		return err
	}
	vlan := b.VlanLink()
	if err := d.step(StepVlanLink, vlan, func() error {
		if err := host.LinkDel(vlan); ignoreNotFound(err) != nil {
			return err
		}
		if err := host.AddVlan(kernel.VlanSpec{Name: vlan, ParentIndex: b.ParentIndex, VlanID: b.VlanID, HardwareAddr: b.ENIMAC}); err != nil {
			return err
		}
		if err := hostVethSysctls(host, vlan); err != nil {
			return err
		}
		return host.LinkSetUp(vlan)
	}); err != nil {
		return err
	}
	vl, err := host.LinkByName(vlan)
	if err != nil {
		return err
	}
	gw := b.SubnetGW
	if err := d.step(StepVlanRoutes, fmt.Sprintf("table %d via %s", table, gw), func() error {
		if err := host.RouteReplace(kernel.Route{Table: table, Dst: ownership.IPNet(gwPrefix(gw)), LinkIndex: vl.Index, Scope: kernel.ScopeLink}); err != nil {
			return err
		}
		return host.RouteReplace(kernel.Route{Table: table, Gw: net.IP(gw.AsSlice()), LinkIndex: vl.Index, Family: fam})
	}); err != nil {
		return err
	}
	if !b.Strict {
		return d.setupHostSide(host, hostIdx, PodIP{Addr: ip.Addr, Table: table})
	}
	pfx := ip.Prefix()
	if err := d.step(StepVlanPodRoute, pfx.String(), func() error {
		return host.RouteReplace(kernel.Route{Table: table, Dst: ownership.IPNet(pfx), LinkIndex: hostIdx, Scope: kernel.ScopeLink})
	}); err != nil {
		return err
	}
	if err := d.step(StepRuleIIFVlan, vlan, func() error {
		return ignoreExist(host.RuleAdd(kernel.Rule{Priority: ownership.PrioVlanIIF, Family: fam, IifName: vlan, Table: table}))
	}); err != nil {
		return err
	}
	return d.step(StepRuleIIFVeth, hostVeth, func() error {
		return ignoreExist(host.RuleAdd(kernel.Rule{Priority: ownership.PrioVlanIIF, Family: fam, IifName: hostVeth, Table: table}))
	})
}

// teardownBranch removes a branch pod's node objects of both modes, since
// the pod may have been made under the other one. They are of two kinds:
//
//   - the address's own (rules 512 and 1536, its host routes in main and
//     in the VLAN table), removed only when the kernel ties the address to
//     the VLAN (tied: see branchTie); the tie itself goes last (rule 1536
//     after the routes and rule 512), so a teardown cut short leaves its
//     retry the same proof;
//   - the VLAN's (its link, whose table routes go with it, and the prio-10
//     iif rules into its table), removed when no other live pod uses the
//     VLAN, tied or not: a VLAN link left by an ADD that failed before the
//     address had any rule is a leak all the same.
//
// As for other pods, an address whose host route (in main, or in the VLAN
// table in strict mode) points at another pod's veth has moved on and is
// left alone, VLAN and all.
func (d *Driver) teardownBranch(host kernel.API, ip PodIP, b *Branch, ourVeth int, tied bool, rep *Report) error {
	pfx := ip.Prefix()
	table := b.Table()
	var routes []*kernel.Route
	for _, t := range []int{kernel.TableMain, table} {
		var r *kernel.Route
		if err := d.step(StepCheckHolder, fmt.Sprintf("%s table %d", pfx, t), func() error {
			var err error
			r, err = routeIn(host, pfx, t)
			return err
		}); err != nil {
			return err
		}
		if r != nil && r.LinkIndex != ourVeth {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: now routed to ifindex %d (table %s)", pfx, r.LinkIndex, ownership.TableName(t)))
			rep.Moved = append(rep.Moved, ip.Addr)
			return nil
		}
		if r != nil {
			routes = append(routes, r)
		}
	}
	holder, err := vlanHolder(host, table, ip.Addr, ourVeth)
	if err != nil {
		return fmt.Errorf("who uses %s: %w", b.VlanLink(), err)
	}
	var errs []error
	if holder != "" {
		// The VLAN is another pod's now: only this address's own objects
		// are ours to remove.
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s and its table %d: in use by %s", b.VlanLink(), table, holder))
	} else {
		errs = append(errs, d.teardownVlan(host, b, ownership.Family(ip.Addr), rep)...)
	}
	if tied {
		errs = append(errs, d.teardownBranchAddr(host, ip.Addr, table, routes, rep))
	}
	return errors.Join(errs...)
}

// teardownVlan removes the VLAN's link (its table's routes go with it) and
// then the prio-10 iif rules into its table: in strict mode the rule of
// the pod's veth is what ties the pod to its VLAN, so it stays while the
// link does, for the retry to find.
func (d *Driver) teardownVlan(host kernel.API, b *Branch, fam kernel.Family, rep *Report) []error {
	vlan, table := b.VlanLink(), b.Table()
	var errs []error
	if err := d.step(StepDelVlanLink, vlan, func() error {
		err := host.LinkDel(vlan)
		if err == nil {
			rep.removed("link %s and the routes of table %d", vlan, table)
		}
		return ignoreNotFound(err)
	}); err != nil {
		rep.note("kept the iif rules into table %d: %s is left", table, vlan)
		return []error{err}
	}
	if err := d.step(StepDelIIFRules, fmt.Sprintf("table %d", table), func() error {
		gone, err := deleteRules(host, nil, iifRuleMatcher(fam, func(r kernel.Rule) bool { return r.Table == table }))
		for _, r := range gone {
			rep.removed("rule %d iif %s lookup %d", ownership.PrioVlanIIF, r.IifName, table)
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// teardownBranchAddr removes the address's own objects: rule 512, its host
// routes, and last, only when those are gone, rule 1536: the tie a retry
// needs if this is cut short.
func (d *Driver) teardownBranchAddr(host kernel.API, a netip.Addr, table int, routes []*kernel.Route, rep *Report) error {
	pfx := ownership.HostPrefix(a)
	var errs []error
	if err := d.step(StepDelRuleToPod, pfx.String(), func() error {
		gone, err := deleteRules(host, nil, toPodRuleMatcher(a))
		for range gone {
			rep.removed("rule %d to %s lookup main", ownership.PrioToPod, pfx)
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	for _, r := range routes {
		if err := d.step(StepDelHostRoute, pfx.String(), func() error {
			err := host.RouteDel(*r)
			if err == nil {
				rep.removed("route %s (table %s)", pfx, ownership.TableName(r.Table))
			}
			return ignoreNotFound(err)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Keep the tie: the retry must still be able to prove the rest.
		return errors.Join(errs...)
	}
	if err := d.step(StepDelRuleFrom, pfx.String(), func() error {
		gone, err := deleteRules(host, nil, fromPodRuleMatcher(a, func(t int) bool { return t == table }))
		for _, r := range gone {
			rep.removed("rule %d from %s lookup %s", ownership.PrioFromPod, pfx, ownership.TableName(r.Table))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
