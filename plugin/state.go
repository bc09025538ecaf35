package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// In the reference result format (the default) the cleanup state lives in
// the CNI result exactly as the reference lays it out
// (docs/reference-facts.md#cleanup-state), so results are interchangeable
// with it:
//
//	interfaces[2i]   {name: <host veth>}
//	interfaces[2i+1] {name: <CNI_IFNAME>, sandbox: <netns>, mac: "<route table>"}
//	interfaces[last] {name: dummy<hash>, mac: "<vlan id>", sandbox: "<device>"}
//
// "mac" of the container interface holds the decimal route table id, and
// the dummy interface (never created in a kernel) carries the VLAN id and,
// for non-branch pods, the device number. The spec result format
// (specresult.go) records only what the CNI spec's fields mean.

// Limits on what a decoded state may claim. A result is input the plugin
// does not control: these keep a forged one from naming kernel objects
// that are not a pod's.
const (
	maxResultInterfaces = 64
	maxDeviceNumber     = 1023
	maxVlanID           = 4094
)

// CleanupState is what DEL needs to tear a pod down without ipamd.
type CleanupState struct {
	Pod driver.Pod
	// DeviceNumber is the ENI the pod's IP came from; -1 when not recorded.
	DeviceNumber int
	// VlanID is the branch ENI's VLAN; 0 for a regular pod.
	VlanID int
	// FromDummy says whether the dummy interface was there (results made by
	// reference versions before v1.12.1 lack it).
	FromDummy bool
}

// encodeResult builds the ADD result carrying the cleanup state.
func encodeResult(pod driver.Pod, netns string, device int, podNS, podName string) *current.Result {
	vlanID := 0
	var gw net.IP
	if pod.Branch != nil {
		vlanID = pod.Branch.VlanID
		gw = net.IP(pod.Branch.SubnetGW.AsSlice())
	}
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	table := kernel.TableMain
	if len(pod.IPs) > 0 {
		table = pod.IPs[0].Table
	}
	r.Interfaces = []*current.Interface{
		{Name: pod.HostVeth},
		{Name: pod.ContainerIf, Sandbox: netns, Mac: strconv.Itoa(table)},
	}
	for _, ip := range pod.IPs {
		idx := 1
		r.IPs = append(r.IPs, &current.IPConfig{Interface: &idx, Address: *hostIPNet(ip.Addr), Gateway: gw})
	}
	dummy := &current.Interface{Name: ownership.Dummy(podNS, podName), Mac: strconv.Itoa(vlanID)}
	if vlanID == 0 {
		dummy.Sandbox = strconv.Itoa(device)
	}
	r.Interfaces = append(r.Interfaces, dummy)
	return r
}

func hostIPNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// DecodeResult reads the cleanup state out of a result as the plugin
// printed it in the given resultFormat (a journal's ADD result, a
// runtime's cached result), with the same checks as a DEL's prevResult.
func DecodeResult(raw []byte, format, ifName, podNS, podName, vethPrefix string) (*CleanupState, error) {
	res, err := create.CreateFromBytes(raw)
	if err != nil {
		return nil, badPrev("cannot parse the result: %v", err)
	}
	return decodeCleanupState(&formattedResult{result: res, format: format}, ifName, podNS, podName, vethPrefix)
}

// formattedResult is a result with the resultFormat it is to be read in
// (the netconf's, for a prevResult: NetConf.PrevResult).
type formattedResult struct {
	result types.Result
	format string
}

// decodeCleanupState reads the cleanup state out of a prevResult, in its
// format. It never guesses: a value that is present but not what this
// plugin writes is an error (CNI code 7) and DEL then touches nothing.
func decodeCleanupState(prev *formattedResult, ifName, podNS, podName, vethPrefix string) (*CleanupState, error) {
	if prev == nil || prev.result == nil {
		return nil, badPrev("no prevResult")
	}
	format := prev.format
	res, err := current.NewResultFromResult(prev.result)
	if err != nil {
		return nil, badPrev("cannot convert to CNI %s: %v", current.ImplementedSpecVersion, err)
	}
	if len(res.Interfaces) > maxResultInterfaces {
		return nil, badPrev("%d interfaces (at most %d)", len(res.Interfaces), maxResultInterfaces)
	}
	ci, err := containerInterface(res, ifName)
	if err != nil {
		return nil, err
	}
	if format == ResultFormatSpec {
		return decodeSpecState(res, ci, podNS, podName, vethPrefix)
	}
	if mac := res.Interfaces[ci].Mac; isMAC(mac) {
		// A spec-format result (resultFormat "spec") read as a reference one.
		return nil, wrongFormat(ResultFormatSpec, fmt.Sprintf("%s's mac %q is a MAC address, not a route table", ifName, mac))
	}
	st := &CleanupState{DeviceNumber: -1, Pod: driver.Pod{ContainerIf: ifName}}
	if st.Pod.HostVeth, err = hostVeth(res, ci, podNS, podName, vethPrefix); err != nil {
		return nil, err
	}
	if err := decodeDummy(res, st, podNS, podName); err != nil {
		return nil, err
	}
	table, err := decodeTable(res.Interfaces[ci].Mac, st.DeviceNumber)
	if err != nil {
		return nil, err
	}
	if st.VlanID != 0 {
		// A branch pod's table is its VLAN's; the dummy is the source of
		// truth (as in the reference), the container mac must agree.
		vt := st.VlanID + ownership.VlanTableOffset
		if !ownership.IsPodTable(vt) || (res.Interfaces[ci].Mac != "" && table != vt) {
			return nil, badPrev("VLAN %d and route table %q disagree (want table %d)", st.VlanID, res.Interfaces[ci].Mac, vt)
		}
		table = vt
		st.Pod.Branch = &driver.Branch{VlanID: st.VlanID}
	}
	if st.Pod.IPs, err = podIPs(res, ci, table); err != nil {
		return nil, err
	}
	return st, nil
}

// containerInterface is the index of the pod's interface: the first named
// CNI_IFNAME with a sandbox, as the plugin writes it in either format.
func containerInterface(res *current.Result, ifName string) (int, error) {
	for i, itf := range res.Interfaces {
		if itf != nil && itf.Name == ifName && itf.Sandbox != "" {
			return i, nil
		}
	}
	return -1, badPrev("no interface %q with a sandbox", ifName)
}

// hostVeth is the host veth the result names (the interface just before
// the pod's, with no sandbox), or the pod's own name when it names none.
// A named one must be the pod's: a valid prefix and the pod's hash.
func hostVeth(res *current.Result, ci int, podNS, podName, vethPrefix string) (string, error) {
	if ci == 0 || res.Interfaces[ci-1] == nil || res.Interfaces[ci-1].Sandbox != "" {
		return ownership.HostVeth(vethPrefix, podNS, podName), nil
	}
	hv := res.Interfaces[ci-1].Name
	if len(hv) > kernel.MaxLinkNameLen || !ownership.HasPodSuffix(hv, podNS, podName) ||
		ownership.ValidatePrefix(hv[:len(hv)-ownership.SuffixLen]) != nil {
		return "", badPrev("host interface %q is not this pod's veth (%s…%s)", hv, vethPrefix, ownership.PodSuffix(podNS, podName, 0))
	}
	return hv, nil
}

// podIPs are the addresses the result gives the pod's interface, each a
// pod host address (/32 or /128), with the given table.
func podIPs(res *current.Result, ci, table int) ([]driver.PodIP, error) {
	var ips []driver.PodIP
	for i, ipc := range res.IPs {
		if ipc == nil || ipc.Interface == nil {
			continue
		}
		if *ipc.Interface < 0 || *ipc.Interface >= len(res.Interfaces) {
			return nil, badPrev("ips[%d] names interface %d of %d", i, *ipc.Interface, len(res.Interfaces))
		}
		if *ipc.Interface != ci {
			continue // another plugin's address
		}
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		ones, bits := ipc.Address.Mask.Size()
		a = a.Unmap()
		if !ok || !ownership.ValidPodAddr(a) || ones != a.BitLen() || (bits != 32 && bits != 128) {
			return nil, badPrev("ips[%d] %s is not a pod host address (/32 or /128)", i, ipc.Address.String())
		}
		ips = append(ips, driver.PodIP{Addr: a, Table: table})
	}
	return ips, nil
}

func decodeDummy(res *current.Result, st *CleanupState, podNS, podName string) error {
	want := ownership.Dummy(podNS, podName)
	for _, itf := range res.Interfaces {
		if itf == nil || itf.Name != want {
			continue
		}
		st.FromDummy = true
		vlan, err := strictInt(itf.Mac, 0, maxVlanID)
		if err != nil {
			return badPrev("dummy interface mac (VLAN id) %q: %v", itf.Mac, err)
		}
		st.VlanID = vlan
		if itf.Sandbox != "" {
			dev, err := strictInt(itf.Sandbox, 0, maxDeviceNumber)
			if err != nil {
				return badPrev("dummy interface sandbox (device number) %q: %v", itf.Sandbox, err)
			}
			st.DeviceNumber = dev
		}
		return nil
	}
	return nil
}

// decodeTable reads the container interface's "mac" (route table). An
// empty one falls back to the device number; without either the table is
// unknown and teardown matches the pod's own 1536 rules in any pod table.
func decodeTable(mac string, device int) (int, error) {
	if mac == "" {
		switch {
		case device == 0:
			return kernel.TableMain, nil
		case device > 0:
			return device + 1, nil
		}
		return ownership.TableUnknown, nil
	}
	t, err := strictInt(mac, 1, 65535)
	if err != nil {
		return 0, badPrev("container interface mac (route table) %q: %v", mac, err)
	}
	if t == 1 { // the reference's legacy encoding of main
		return kernel.TableMain, nil
	}
	if !ownership.IsPodTable(t) {
		return 0, badPrev("route table %d is not a pod table", t)
	}
	return t, nil
}

// strictInt accepts only plain decimal digits within [lo, hi]: no sign,
// exponent, spaces or hex.
func strictInt(s string, lo, hi int) (int, error) {
	if s == "" || len(s) > 6 {
		return 0, fmt.Errorf("not a number between %d and %d", lo, hi)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("not a number between %d and %d", lo, hi)
		}
	}
	n, _ := strconv.Atoi(s)
	if n < lo || n > hi {
		return 0, fmt.Errorf("not a number between %d and %d", lo, hi)
	}
	return n, nil
}

func badPrev(format string, a ...any) error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid prevResult", fmt.Sprintf(format, a...))
}
