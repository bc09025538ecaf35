package driver

import (
	"github.com/vpccni/vpccni/ownership"
	"net/netip"

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
	p.Branch = branchOf(host, p, rules)
	return p, nil
}

// branchOf recognises a branch-ENI pod from the kernel: a strict pod has a
// prio-10 iif rule for its host veth, a standard one a 1536 rule into a
// VLAN table whose VLAN link exists.
func branchOf(host kernel.API, p *Pod, rules []kernel.Rule) *Branch {
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
	if _, err := host.LinkByName(b.VlanLink()); !strict && err != nil {
		return nil // a regular pod on a table above 100 (device 100+)
	}
	for i := range p.IPs {
		p.IPs[i].Table = table
	}
	return b
}
