package engine

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/plugin"
)

// Branch-ENI modes: every pod gets a branch ENI of its own from the
// harness's static pod-ENI source (the API server's pod annotation in a
// real cluster), a new VLAN for every sandbox.
const (
	ModeBranchStrict   = "branch-eni-strict"
	ModeBranchStandard = "branch-eni-standard"
)

func isBranch(mode string) bool { return strings.HasPrefix(mode, "branch-eni-") }

// enforcingMode is the netconf's podSGEnforcingMode for a scenario mode.
func enforcingMode(mode string) string {
	if mode == ModeBranchStandard {
		return plugin.ModeStandard
	}
	return plugin.ModeStrict
}

// branchSubnet is where branch ENIs' addresses come from.
var branchSubnet = netip.MustParsePrefix("10.1.0.0/24")

// giveBranchENI publishes a fresh branch ENI for the pod's next sandbox,
// as the VPC resource controller annotates a pod before it runs.
func (r *run) giveBranchENI(p *pod) {
	r.vlanSeq++
	v := r.vlanSeq
	eni := podeni.BranchENI{
		ENIID:    fmt.Sprintf("eni-0branch%08x", v),
		VlanID:   v,
		MAC:      net.HardwareAddr{0x0a, 0xbb, 0, 0, byte(v >> 8), byte(v)},
		IPv4:     netip.AddrFrom4([4]byte{10, 1, 0, byte(10 + v)}),
		SubnetV4: branchSubnet,
	}
	r.podENI.Set(p.ns, p.name, eni)
	p.vlan = v
}

// trunkIndex is how ipamd finds the trunk ENI's link on the node.
func (r *run) trunkIndex() (int, error) {
	inst, err := r.cloud.Instance(bg())
	if err != nil {
		return 0, err
	}
	t, ok := inst.Trunk()
	if !ok {
		return 0, fmt.Errorf("the instance has no trunk ENI")
	}
	l, err := r.node.LinkByName(eniLink(t.DeviceNumber))
	return l.Index, err
}
