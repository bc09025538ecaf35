package driver

import (
	"github.com/vpccni/vpccni/ownership"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/kernel"
)

// Inspect rebuilds a Pod from the kernel: the container interface's host
// addresses are the pod's IPs, its veth peer is the host veth, and a 1536
// rule from an IP names its table (none: main). Only the pod's own
// namespace is trusted as the source of the IPs, so Inspect cannot be
// talked into naming another pod's address.
func (d *Driver) Inspect(host, pod kernel.API, containerIf string) (*Pod, error) {
	if pod == nil {
		return nil, nil
	}
	l, err := pod.LinkByName(containerIf)
	if kernel.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := &Pod{ContainerIf: containerIf, MTU: l.MTU}
	if l.Kind == kernel.KindVeth && l.ParentIndex != 0 {
		if hl, err := host.LinkByIndex(l.ParentIndex); err == nil {
			p.HostVeth = hl.Name
		}
	}
	addrs, err := pod.AddrList(l.Index, kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	rules, err := host.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IPNet.IP)
		ones, bits := a.IPNet.Mask.Size()
		ip = ip.Unmap()
		if !ok || !ownership.ValidPodAddr(ip) || ones != bits {
			continue
		}
		pip := PodIP{Addr: ip, Table: kernel.TableMain}
		m := fromPodRuleMatcher(pip.Addr, func(int) bool { return true })
		for _, r := range rules {
			if m.match(r) {
				pip.Table = r.Table
				break
			}
		}
		p.IPs = append(p.IPs, pip)
	}
	node, err := ownership.ReadNode(host)
	if err != nil {
		return nil, err
	}
	p.Branch = branchOf(host, node, p, rules)
	if p.Branch == nil {
		// An address the node does not show to be a pod's is nothing to
		// tear down from here (a branch ENI's, before a rule ties it to
		// its VLAN: ipamd's reply names that VLAN).
		p.IPs = slices.DeleteFunc(p.IPs, func(ip PodIP) bool {
			_, err := node.PodTables(ip.Addr)
			return err != nil
		})
		if len(p.IPs) == 0 {
			return nil, nil
		}
	}
	return p, nil
}

// branchOf recognises a branch-ENI pod from the kernel: a strict pod has a
// prio-10 iif rule for its host veth, a standard one a 1536 rule into a
// VLAN table, and either that VLAN's link exists or its address lies in
// no ENI subnet of the node (a teardown cut short after the VLAN went
// leaves the rule alone).
func branchOf(host kernel.API, node *ownership.Node, p *Pod, rules []kernel.Rule) *Branch {
	table, strict := 0, false
	for _, r := range rules {
		if r.Priority == ownership.PrioVlanIIF && p.HostVeth != "" && r.IifName == p.HostVeth {
			table, strict = r.Table, true
		}
	}
	for _, ip := range p.IPs {
		if !strict && ip.Table > ownership.VlanTableOffset {
			table = ip.Table
		}
	}
	b := &Branch{VlanID: table - ownership.VlanTableOffset}
	if table == 0 || !ownership.ValidVlan(b.VlanID) {
		return nil
	}
	// Without its link, a table above 100 is a VLAN's only if it is not
	// main (the table of an address with no rule 1536 at all) and the
	// address is on no ENI subnet (a regular pod's, device 100 or more).
	if _, err := host.LinkByName(b.VlanLink()); !strict && err != nil && (table == kernel.TableMain || onENISubnet(node, p.IPs)) {
		return nil
	}
	for i := range p.IPs {
		p.IPs[i].Table = table
	}
	return b
}

// onENISubnet reports whether any of the addresses lies in a subnet of the
// node's ENIs (a regular pod's).
func onENISubnet(node *ownership.Node, ips []PodIP) bool {
	return slices.ContainsFunc(ips, func(ip PodIP) bool {
		_, err := node.PodTables(ip.Addr)
		return err == nil
	})
}
