package driver

import (
	"fmt"
	"github.com/vpccni/vpccni/ownership"
	"net"

	"github.com/vpccni/vpccni/kernel"
)

// Setup steps, in order. The names appear in errors and are the points at
// which the harness injects faults.
const (
	StepRemoveStaleVeth = "remove-stale-veth"
	StepCreateVeth      = "create-veth"
	StepHostSysctls     = "host-veth-sysctls"
	StepHostVethUp      = "host-veth-up"
	StepPodLinkUp       = "pod-link-up"
	StepPodIPv6Enable   = "pod-ipv6-enable"
	StepPodGatewayRoute = "pod-gateway-route"
	StepPodDefaultRoute = "pod-default-route"
	StepPodAddress      = "pod-address"
	StepPodNeighbour    = "pod-neighbour"
	StepWaitDAD         = "wait-dad"
	StepClearStaleRules = "clear-stale-rules"
	StepHostRoute       = "host-route"
	StepRuleToPod       = "rule-to-pod"
	StepRuleFromPod     = "rule-from-pod"
)

// Setup makes the pod's objects (docs/reference-facts.md#ipv4-pod): a veth pair created
// from the pod side with its peer directly in the node namespace, the pod
// side's link-local gateway, static neighbour and host address, and on the
// node a host route plus rule 512 to the pod and, off the main table, rule
// 1536 from the pod to its ENI's table. The host route is made before the
// rules so that whoever reads the kernel always sees who holds an IP that
// has rules.
func (d *Driver) Setup(host, pod kernel.API, p Pod) error {
	if err := validate(p); err != nil {
		return err
	}
	if _, err := host.LinkByName(p.HostVeth); err == nil {
		// A pod recreated with the same name: the old sandbox's veth is in
		// the way of the new one.
		if err := d.step(StepRemoveStaleVeth, p.HostVeth, func() error { return ignoreNotFound(host.LinkDel(p.HostVeth)) }); err != nil {
			return err
		}
	} else if !kernel.IsNotFound(err) {
		return fmt.Errorf("look up host veth %s: %w", p.HostVeth, err)
	}
	mac := hostMAC(p.MACSeed + "/" + p.HostVeth)
	if err := d.step(StepCreateVeth, p.ContainerIf+"/"+p.HostVeth, func() error {
		return pod.AddVeth(kernel.VethSpec{Name: p.ContainerIf, MTU: p.MTU, PeerName: p.HostVeth,
			PeerNamespace: host, PeerHardwareAddr: mac})
	}); err != nil {
		return err
	}
	if err := d.step(StepHostSysctls, p.HostVeth, func() error { return hostVethSysctls(host, p.HostVeth) }); err != nil {
		return err
	}
	if err := d.step(StepHostVethUp, p.HostVeth, func() error { return host.LinkSetUp(p.HostVeth) }); err != nil {
		return err
	}
	if err := d.step(StepPodLinkUp, p.ContainerIf, func() error { return pod.LinkSetUp(p.ContainerIf) }); err != nil {
		return err
	}
	podLink, err := pod.LinkByName(p.ContainerIf)
	if err != nil {
		return fmt.Errorf("look up %s in the pod: %w", p.ContainerIf, err)
	}
	hostLink, err := host.LinkByName(p.HostVeth)
	if err != nil {
		return fmt.Errorf("look up %s on the node: %w", p.HostVeth, err)
	}
	for _, ip := range p.IPs {
		if err := d.setupPodSide(pod, podLink.Index, ip, hostLink.HardwareAddr); err != nil {
			return err
		}
		if p.Branch != nil {
			if err := d.setupBranchHost(host, p.HostVeth, hostLink.Index, ip, p.Branch); err != nil {
				return err
			}
		} else if err := d.setupHostSide(host, hostLink.Index, ip); err != nil {
			return err
		}
	}
	d.log.Debug("pod network set up", "hostVeth", p.HostVeth, "ips", p.IPs)
	return nil
}

func validate(p Pod) error {
	if p.HostVeth == "" || len(p.HostVeth) > kernel.MaxLinkNameLen {
		return fmt.Errorf("host veth name %q is empty or longer than %d bytes", p.HostVeth, kernel.MaxLinkNameLen)
	}
	if p.ContainerIf == "" || len(p.ContainerIf) > kernel.MaxLinkNameLen {
		return fmt.Errorf("container interface name %q is empty or longer than %d bytes", p.ContainerIf, kernel.MaxLinkNameLen)
	}
	if len(p.IPs) == 0 {
		return fmt.Errorf("pod has no IP address to set up")
	}
	if b := p.Branch; b != nil {
		if !ownership.ValidVlan(b.VlanID) || b.ParentIndex <= 0 || !b.SubnetGW.IsValid() || len(b.ENIMAC) != 6 {
			return fmt.Errorf("branch ENI VLAN %d (trunk ifindex %d, gateway %s, MAC %s) is incomplete or out of range", b.VlanID, b.ParentIndex, b.SubnetGW, b.ENIMAC)
		}
		for _, ip := range p.IPs {
			if ip.Addr.Is4() != b.SubnetGW.Is4() {
				return fmt.Errorf("branch ENI gateway %s and pod address %s are of different families", b.SubnetGW, ip.Addr)
			}
		}
	}
	for _, ip := range p.IPs {
		if !ownership.ValidPodAddr(ip.Addr) || !ownership.IsPodTable(ip.Table) {
			return fmt.Errorf("refusing to set up %s: not a pod address or pod table", ip)
		}
	}
	return nil
}

// hostVethSysctls: no router advertisements or forwarding on the host end;
// ENOENT means the kernel has no IPv6, which is fine.
func hostVethSysctls(host kernel.API, hostVeth string) error {
	for _, kv := range [][2]string{{"accept_ra", "0"}, {"accept_redirects", "1"}, {"forwarding", "0"}} {
		if err := host.SysctlSet("net/ipv6/conf/"+hostVeth+"/"+kv[0], kv[1]); ignoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) setupPodSide(pod kernel.API, podIf int, ip PodIP, hostMAC net.HardwareAddr) error {
	if ip.Addr.Is6() {
		// A new namespace may come with IPv6 disabled on its links.
		if err := d.step(StepPodIPv6Enable, "eth0 and lo", func() error {
			l, err := pod.LinkByIndex(podIf)
			if err != nil {
				return err
			}
			for _, ifc := range []string{l.Name, "lo"} {
				if err := pod.SysctlSet("net/ipv6/conf/"+ifc+"/disable_ipv6", "0"); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	gw := gateway(ip.Addr)
	gwNet := ownership.IPNet(gwPrefix(gw))
	if err := d.step(StepPodGatewayRoute, gw.String(), func() error {
		return pod.RouteReplace(kernel.Route{Dst: gwNet, LinkIndex: podIf, Scope: kernel.ScopeLink})
	}); err != nil {
		return err
	}
	if err := d.step(StepPodDefaultRoute, "via "+gw.String(), func() error {
		return pod.RouteReplace(kernel.Route{Gw: net.IP(gw.AsSlice()), LinkIndex: podIf, Family: ownership.Family(ip.Addr)})
	}); err != nil {
		return err
	}
	if err := d.step(StepPodAddress, ip.Prefix().String(), func() error {
		return ignoreExist(pod.AddrAdd(podIf, ownership.IPNet(ip.Prefix())))
	}); err != nil {
		return err
	}
	if err := d.step(StepPodNeighbour, gw.String(), func() error {
		return pod.NeighSet(kernel.Neigh{LinkIndex: podIf, IP: net.IP(gw.AsSlice()), HardwareAddr: hostMAC, State: kernel.NeighStatePermanent})
	}); err != nil {
		return err
	}
	if ip.Addr.Is4() {
		return nil
	}
	return d.step(StepWaitDAD, ip.Prefix().String(), func() error { return d.waitDAD(pod, podIf) })
}

func (d *Driver) setupHostSide(host kernel.API, hostIdx int, ip PodIP) error {
	pfx := ip.Prefix()
	// ipamd has just given this address to us, so any 1536 rule for it in
	// another table is a leftover of an earlier holder that would send our
	// egress out of the wrong ENI (#3270 asks for exactly this clean-up).
	if err := d.step(StepClearStaleRules, pfx.String(), func() error {
		_, err := deleteRules(host, nil, fromPodRuleMatcher(ip.Addr, func(table int) bool { return table != ip.Table }))
		return err
	}); err != nil {
		return err
	}
	if err := d.step(StepHostRoute, pfx.String(), func() error {
		return host.RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: ownership.IPNet(pfx), LinkIndex: hostIdx, Scope: kernel.ScopeLink})
	}); err != nil {
		return err
	}
	// Rule 1536 before rule 512: for a branch pod, 1536 into the VLAN's
	// table is what ties the address to the VLAN (branchTie), so an ADD cut
	// short between the two leaves its DEL the proof it needs.
	if ip.Table != kernel.TableMain {
		if err := d.step(StepRuleFromPod, pfx.String(), func() error {
			return ignoreExist(host.RuleAdd(ownership.FromPodRule(ip.Addr, ip.Table)))
		}); err != nil {
			return err
		}
	}
	return d.step(StepRuleToPod, pfx.String(), func() error {
		return ignoreExist(host.RuleAdd(ownership.ToPodRule(ip.Addr)))
	})
}
