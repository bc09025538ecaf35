package plugin

import (
	"fmt"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// The spec result format (resultFormat "spec") is for callers that read
// the result as the CNI spec defines it; podman, for one, parses every
// "mac" of an interface with an address as a MAC address and refuses the
// reference's route table there. Every field means what the spec says:
//
//	interfaces[0] {name: <host veth>, mac: <its MAC>}
//	interfaces[1] {name: <CNI_IFNAME>, mac: <its MAC>, sandbox: <netns>}
//	interfaces[2] {name: vlan.eth.<id>, mac: <its MAC>}   branch pods only
//	ips[*]        {interface: 1, address: <IP>/32 or /128, gateway: 169.254.1.1 or fe80::1}
//	routes        the pod's default route(s) through that gateway
//
// It cannot carry the route table or the device: a DEL reading it leaves
// the table to the node (the driver's teardown takes an address's tables
// from the ENIs whose subnets hold it). A branch pod's VLAN link is an
// interface the ADD made on the node, so it is listed under its own name,
// and its name is how a DEL learns the VLAN: without it, the first source
// of a strict branch pod would name no VLAN, and its DEL would leave the
// VLAN link and its iif rules behind (ipamd's release reply comes too
// late to add them, the address being torn down already). The reference
// cannot read this format back.

// encodeSpecResult builds the spec-format ADD result from the pod's
// interfaces as the kernel shows them after setup (vlanMAC: a branch
// pod's VLAN link's).
func encodeSpecResult(pod driver.Pod, netns string, hostMAC, podMAC, vlanMAC net.HardwareAddr) *current.Result {
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion, Interfaces: []*current.Interface{
		{Name: pod.HostVeth, Mac: macString(hostMAC)},
		{Name: pod.ContainerIf, Mac: macString(podMAC), Sandbox: netns},
	}}
	if pod.Branch != nil {
		r.Interfaces = append(r.Interfaces, &current.Interface{Name: pod.Branch.VlanLink(), Mac: macString(vlanMAC)})
	}
	var v4, v6 bool
	for _, ip := range pod.IPs {
		idx := 1
		gw := net.IP(driver.GatewayV4.AsSlice())
		if ip.Addr.Is6() {
			gw = net.IP(driver.GatewayV6.AsSlice())
		}
		r.IPs = append(r.IPs, &current.IPConfig{Interface: &idx, Address: *hostIPNet(ip.Addr), Gateway: gw})
		// One default route per family, as the driver makes in the pod.
		if (ip.Addr.Is4() && !v4) || (ip.Addr.Is6() && !v6) {
			bits := ip.Addr.BitLen()
			r.Routes = append(r.Routes, &types.Route{Dst: net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)}, GW: gw})
			v4, v6 = v4 || ip.Addr.Is4(), v6 || ip.Addr.Is6()
		}
	}
	return r
}

func macString(m net.HardwareAddr) string {
	if len(m) == 0 {
		return ""
	}
	return m.String()
}

// specResult reads the MACs of the pod's veth pair, as set up, into the
// spec-format result.
func specResult(host, pod kernel.API, p driver.Pod, netns string) (*current.Result, error) {
	hl, err := host.LinkByName(p.HostVeth)
	if err != nil {
		return nil, fmt.Errorf("read host veth %s for the result: %w", p.HostVeth, err)
	}
	cl, err := pod.LinkByName(p.ContainerIf)
	if err != nil {
		return nil, fmt.Errorf("read %s in the pod for the result: %w", p.ContainerIf, err)
	}
	var vlanMAC net.HardwareAddr
	if p.Branch != nil {
		vl, err := host.LinkByName(p.Branch.VlanLink())
		if err != nil {
			return nil, fmt.Errorf("read VLAN link %s for the result: %w", p.Branch.VlanLink(), err)
		}
		vlanMAC = vl.HardwareAddr
	}
	return encodeSpecResult(p, netns, hl.HardwareAddr, cl.HardwareAddr, vlanMAC), nil
}

// decodeSpecState reads the cleanup state out of a spec-format result:
// the addresses from ips, the host veth and the container interface from
// interfaces, and a branch pod's VLAN from its VLAN link's name; the
// table (but a VLAN's) and the device are unknown. A result in
// the reference format (a dummy interface, a number where a MAC belongs)
// is refused, naming the format, as is a "mac" that is not a MAC.
func decodeSpecState(res *current.Result, ci int, podNS, podName, vethPrefix string) (*CleanupState, error) {
	if i := slices.IndexFunc(res.Interfaces, func(itf *current.Interface) bool {
		return itf != nil && itf.Name == ownership.Dummy(podNS, podName)
	}); i >= 0 {
		return nil, wrongFormat(ResultFormatReference, fmt.Sprintf("interfaces[%d] is the reference's %s, which carries its cleanup state", i, res.Interfaces[i].Name))
	}
	// The pod's own interfaces: the container interface, and the host veth
	// just before it when the result names one.
	own := []int{ci}
	if ci > 0 && res.Interfaces[ci-1] != nil && res.Interfaces[ci-1].Sandbox == "" {
		own = append(own, ci-1)
	}
	for _, i := range own {
		itf := res.Interfaces[i]
		if itf.Mac == "" || isMAC(itf.Mac) {
			continue
		}
		if _, err := strictInt(itf.Mac, 0, 65535); err == nil {
			return nil, wrongFormat(ResultFormatReference, fmt.Sprintf("%s's mac %q is a number (the reference's route table), not a MAC address", itf.Name, itf.Mac))
		}
		return nil, badPrev("%s's mac %q is not a MAC address", itf.Name, itf.Mac)
	}
	st := &CleanupState{DeviceNumber: -1, Pod: driver.Pod{ContainerIf: res.Interfaces[ci].Name}}
	var err error
	if st.Pod.HostVeth, err = hostVeth(res, ci, podNS, podName, vethPrefix); err != nil {
		return nil, err
	}
	table := ownership.TableUnknown
	for i, itf := range res.Interfaces {
		// Names that are no valid VLAN link's are another plugin's
		// interfaces, as any other name.
		id, ok := 0, false
		if itf != nil && itf.Sandbox == "" {
			id, ok = ownership.VlanLinkID(itf.Name)
		}
		switch {
		case !ok:
		case !ownership.ValidVlan(id):
			return nil, badPrev("interfaces[%d] %s: VLAN %d is not a branch ENI's", i, itf.Name, id)
		case st.VlanID != 0 && st.VlanID != id:
			return nil, badPrev("interfaces name VLAN links %d and %d: a pod has one branch ENI", st.VlanID, id)
		default:
			st.VlanID = id
			st.Pod.Branch = &driver.Branch{VlanID: id}
			table = ownership.VlanTable(id)
		}
	}
	if st.Pod.IPs, err = podIPs(res, ci, table); err != nil {
		return nil, err
	}
	return st, nil
}

// isMAC says whether s is an Ethernet MAC address as the spec's "mac"
// holds it (what podman and other strict callers parse).
func isMAC(s string) bool {
	m, err := net.ParseMAC(s)
	return err == nil && len(m) == 6
}

// wrongFormat is a prevResult in the other result format than the
// netconf's: a bad prevResult (code 7) that says which setting to check.
func wrongFormat(got, why string) error {
	want := ResultFormatSpec
	if got == ResultFormatSpec {
		want = ResultFormatReference
	}
	return badPrev("the prevResult is in the %q result format (%s), but the netconf says resultFormat %q: "+
		"the ADD wrote it with another resultFormat, or it is forged", got, why, want)
}
