package driver

import (
	"errors"
	"fmt"

	"github.com/vpccni/vpccni/kernel"
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

// Teardown removes the pod's objects, but only those still this pod's.
//
// Rules are keyed by IP and an IP moves on, so before touching an IP's
// rules the driver asks the kernel who holds it: the main-table host route
// for the IP points at the holder's host veth. Our host veth is the peer of
// our container interface (found through the pod namespace, not by name: a
// pod recreated with the same name has a veth of the same name). If the
// route points at any other link, the IP and its rules belong to someone
// else now and are left alone; if it points at ours, or there is no route
// (our veth went with the namespace), they are ours.
//
// Every step runs even if an earlier one failed, so one failure leaves as
// little as possible; the joined error makes the runtime retry.
func (d *Driver) Teardown(host, pod kernel.API, p Pod) (Report, error) {
	var rep Report
	ourVeth := 0
	if pod != nil {
		if err := d.step(StepFindOwnVeth, p.ContainerIf, func() error {
			l, err := pod.LinkByName(p.ContainerIf)
			if err != nil {
				return ignoreNotFound(err)
			}
			if l.Kind == kernel.KindVeth {
				ourVeth = l.ParentIndex
			}
			return nil
		}); err != nil {
			return rep, err
		}
	}
	var errs []error
	for _, ip := range p.IPs {
		if !ValidPodAddr(ip.Addr) || (ip.Table != TableUnknown && !IsPodTable(ip.Table)) || (p.Branch != nil && !validVlan(p.Branch.VlanID)) {
			errs = append(errs, fmt.Errorf("refusing to tear down %s: not a pod address or pod table", ip))
			continue
		}
		var err error
		if p.Branch != nil {
			err = d.teardownBranch(host, ip, p.Branch, ourVeth, &rep)
		} else {
			err = d.teardownIP(host, ip, ourVeth, &rep)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if pod != nil {
		if err := d.step(StepDelPodVeth, p.ContainerIf, func() error {
			err := pod.LinkDel(p.ContainerIf)
			if err == nil {
				rep.removed("link %s (pod) and its peer %s", p.ContainerIf, p.HostVeth)
			}
			return ignoreNotFound(err)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	d.log.Debug("pod network torn down", "hostVeth", p.HostVeth, "removed", rep.Removed, "skipped", rep.Skipped, "error", err)
	return rep, err
}

func (d *Driver) teardownIP(host kernel.API, ip PodIP, ourVeth int, rep *Report) error {
	pfx := ip.Prefix()
	var route *kernel.Route
	if err := d.step(StepCheckHolder, pfx.String(), func() error {
		var err error
		route, err = routeIn(host, pfx, kernel.TableMain)
		return err
	}); err != nil {
		return err
	}
	if route != nil && route.LinkIndex != ourVeth {
		holder := fmt.Sprintf("ifindex %d", route.LinkIndex)
		if l, err := host.LinkByIndex(route.LinkIndex); err == nil {
			holder = l.Name
		}
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: now routed to %s", pfx, holder))
		d.log.Info("IP has a new holder, leaving its rules alone", "ip", pfx, "holder", holder)
		return nil
	}
	var errs []error
	if err := d.teardownIPRules(host, ip, rep); err != nil {
		errs = append(errs, err)
	}
	if route != nil {
		if err := d.step(StepDelHostRoute, pfx.String(), func() error {
			err := host.RouteDel(*route)
			if err == nil {
				rep.removed("route %s (main)", pfx)
			}
			return ignoreNotFound(err)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// teardownIPRules removes the address's own 512 and 1536 rules (the
// ownership check is the caller's).
func (d *Driver) teardownIPRules(host kernel.API, ip PodIP, rep *Report) error {
	pfx := ip.Prefix()
	var errs []error
	if err := d.step(StepDelRuleToPod, pfx.String(), func() error {
		gone, err := deleteRules(host, toPodRuleMatcher(pfx))
		for range gone {
			rep.removed("rule %d to %s lookup main", PrioToPod, pfx)
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	if ip.Table == kernel.TableMain {
		return errors.Join(errs...)
	}
	// An unknown table (a source older than the table in the result)
	// matches 1536 rules of this exact source in any pod table.
	want := func(t int) bool { return ip.Table == TableUnknown || t == ip.Table }
	if err := d.step(StepDelRuleFrom, pfx.String(), func() error {
		gone, err := deleteRules(host, fromPodRuleMatcher(pfx, want))
		for _, r := range gone {
			rep.removed("rule %d from %s lookup %s", PrioFromPod, pfx, TableName(r.Table))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
