package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/attachrec"
	"github.com/vpccni/vpccni/plugin/driver"
)

// Reasons sent to ipamd with DelNetwork (the reference's values).
const (
	ReasonPodDeleted    = "PodDeleted"
	ReasonSetupNSFailed = "SetupNSFailed"
)

// add gives the pod an address from ipamd and builds its network. If any
// kernel step fails, Add removes what it made and returns the address; the
// result, in the netconf's CNI version, carries the cleanup state.
func (p *Plugin) add(args *skel.CmdArgs) (types.Result, error) {
	inv, err := p.begin(args, "ADD")
	if err != nil {
		return nil, err
	}
	defer inv.end()
	if args.Netns == "" {
		return nil, errorf(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is required for ADD")
	}
	// The host veth's name and ipamd's record are the pod's: without its
	// name two pods would share both.
	if inv.podNS == "" || inv.podName == "" {
		return nil, errorf(types.ErrInvalidEnvironmentVariables,
			"CNI_ARGS must name the pod for ADD: K8S_POD_NAMESPACE and K8S_POD_NAME are required (got %q and %q)", inv.podNS, inv.podName)
	}
	if p.env.IsHostNS != nil {
		if same, err := p.env.IsHostNS(args.Netns); err != nil {
			return nil, cniError(types.ErrInvalidNetNS, "cannot inspect CNI_NETNS", err)
		} else if same {
			return nil, errorf(types.ErrInvalidNetNS, "CNI_NETNS %s is the plugin's own (node) namespace; refusing to set up a pod there", args.Netns)
		}
	}
	host, pod, err := p.handles(args.Netns)
	if err != nil {
		return nil, err
	}
	defer closeAll(host, pod)
	if pod == nil {
		return nil, errorf(types.ErrInvalidNetNS, "pod network namespace %s does not exist", args.Netns)
	}

	reply, out, err := p.assign(background(), inv)
	if err != nil {
		inv.log.Error("ipamd did not assign an address", "outcome", out, "error", err)
		switch out {
		case OutcomeUnreachable, OutcomeTimeout:
			return nil, cniError(types.ErrTryAgainLater, fmt.Sprintf("ipamd at %s is %s", inv.conf.IpamdAddress, out), err)
		case OutcomeRefused:
			return nil, cniError(ErrNoAddress, "ipamd has no address for this pod", err)
		}
		return nil, cniError(ErrIpamd, "ipamd AddNetwork failed", err)
	}
	if err := p.env.Failpoints.Trigger(FailAddAssigned); err != nil {
		p.releaseAfterFailedAdd(inv)
		return nil, cniError(ErrSetupFailed, "failed before setting up the pod network", err)
	}
	podNet, device, err := podFromAddReply(reply, inv)
	if err != nil {
		p.releaseAfterFailedAdd(inv)
		return nil, err
	}
	inv.log.Info("ipamd assigned", "ips", podNet.IPs, "device", device)

	if err := p.env.Driver.Setup(host, pod, podNet); err != nil {
		p.rollback(inv, host, pod, podNet, "setup failed", err)
		return nil, cniError(ErrSetupFailed, "failed to set up the pod network", err)
	}
	if err := p.writeRecord(inv, pod, podNet, device); err != nil {
		// An attachment reported as added without its record would leave
		// DEL without its one source that depends on nothing else.
		p.rollback(inv, host, pod, podNet, "cannot write the attachment's record", err)
		return nil, cniError(ErrSetupFailed, "failed to record the attachment in stateDir "+inv.conf.StateDir, err)
	}
	if err := p.env.Failpoints.Trigger(FailAddResult); err != nil {
		return nil, cniError(ErrSetupFailed, "failed after setting up the pod network", err)
	}
	var res *current.Result
	if inv.conf.ResultFormat == ResultFormatSpec {
		if res, err = specResult(host, pod, podNet, args.Netns); err != nil {
			// Without its result the runtime would not know the pod's
			// network: undo it as a failed setup.
			p.rollback(inv, host, pod, podNet, "cannot write the spec-format result", err)
			return nil, cniError(ErrSetupFailed, "failed to read the pod's interfaces for the result", err)
		}
	} else {
		res = encodeResult(podNet, args.Netns, device, inv.podNS, inv.podName)
	}
	inv.log.Info("pod added", "hostVeth", podNet.HostVeth, "ips", podNet.IPs, "resultFormat", inv.conf.ResultFormat)
	return res.GetAsVersion(inv.conf.CNIVersion)
}

// rollback removes what a failed ADD made and returns the address, unless
// the removal is incomplete.
func (p *Plugin) rollback(inv *invocation, host, pod kernel.API, podNet driver.Pod, why string, err error) {
	inv.log.Error(why+", rolling back", "error", err)
	if _, terr := p.env.Driver.Teardown(host, pod, podNet); terr != nil {
		// Keep the address: its objects are still in the kernel, and a
		// released address could be handed to a new pod. The DEL the
		// runtime sends after a failed ADD releases it.
		inv.log.Error("rollback incomplete; keeping the address and the attachment's record until DEL", "error", terr)
	} else {
		p.forgetRecord(inv)
		p.releaseAfterFailedAdd(inv)
	}
}

// writeRecord records the attachment for DEL (plugin/attachrec), with
// the host veth's ifindex as the kernel shows it now: the proof a DEL
// whose pod namespace is gone offers ipamd.
func (p *Plugin) writeRecord(inv *invocation, pod kernel.API, podNet driver.Pod, device int) error {
	if err := p.env.Failpoints.Trigger(FailAddRecord); err != nil {
		return err
	}
	idx, err := ownership.SandboxVeth(pod, inv.args.IfName)
	if err != nil {
		return err
	}
	rec := attachrec.Record{Version: attachrec.Version, NetworkName: inv.conf.Name, ContainerID: inv.args.ContainerID,
		IfName: inv.args.IfName, PodNamespace: inv.podNS, PodName: inv.podName, Netns: inv.args.Netns,
		HostVeth: podNet.HostVeth, HostVethIndex: idx, Device: device}
	if !filepath.IsAbs(rec.Netns) || filepath.Clean(rec.Netns) != rec.Netns {
		rec.Netns = "" // a path the runtime gave loosely: not worth a failed ADD
	}
	for _, ip := range podNet.IPs {
		rec.IPs = append(rec.IPs, attachrec.IP{Addr: ip.Addr, Table: ip.Table})
	}
	if podNet.Branch != nil {
		rec.VlanID, rec.Strict = podNet.Branch.VlanID, podNet.Branch.Strict
	}
	if err := p.records(inv).Write(rec); err != nil {
		return err
	}
	return p.env.Failpoints.Trigger(FailAddRecorded)
}

func (p *Plugin) releaseAfterFailedAdd(inv *invocation) {
	if _, out, err := p.release(background(), inv, ReasonSetupNSFailed, 0, false); err != nil {
		inv.log.Warn("could not return the address to ipamd", "outcome", out, "error", err)
	}
}

// podFromAddReply turns ipamd's answer into the pod to build.
func podFromAddReply(reply *rpc.AddNetworkReply, inv *invocation) (driver.Pod, int, error) {
	pod := driver.Pod{
		HostVeth:    ownership.HostVeth(inv.conf.VethPrefix, inv.podNS, inv.podName),
		ContainerIf: inv.args.IfName,
		MTU:         inv.conf.MTUValue(),
		MACSeed:     inv.args.ContainerID,
	}
	ips, device, err := ipsFromMetadata(reply.GetIPAllocationMetadata(), int(reply.GetPodVlanId()))
	if err != nil {
		return pod, 0, err
	}
	if len(ips) == 0 {
		return pod, 0, errorf(ErrIpamd, "ipamd reported success but gave no address")
	}
	pod.IPs = ips
	if reply.GetPodVlanId() != 0 {
		b, err := branchFromReply(reply, inv.conf.PodSGEnforcingMode == ModeStrict)
		if err != nil {
			return pod, 0, err
		}
		pod.Branch = b
		if b.Strict {
			// Strict mode names the host veth vlan<hash> (docs/reference-facts.md#names).
			pod.HostVeth = ownership.HostVeth(ownership.StrictVethPrefix, inv.podNS, inv.podName)
		}
		device = -1
	}
	return pod, device, nil
}

// branchFromReply validates ipamd's branch-ENI fields.
func branchFromReply(reply *rpc.AddNetworkReply, strict bool) (*driver.Branch, error) {
	vlan := int(reply.GetPodVlanId())
	mac, err := net.ParseMAC(reply.GetPodENIMAC())
	gw, gerr := netip.ParseAddr(reply.GetPodENISubnetGW())
	if vlan < 1 || vlan > 4094 || err != nil || len(mac) != 6 || gerr != nil || reply.GetParentIfIndex() <= 0 ||
		!ownership.IsPodTable(vlan+ownership.VlanTableOffset) {
		return nil, errorf(ErrIpamd, "ipamd's branch ENI is unusable: VLAN %d, MAC %q, gateway %q, trunk ifindex %d",
			vlan, reply.GetPodENIMAC(), reply.GetPodENISubnetGW(), reply.GetParentIfIndex())
	}
	return &driver.Branch{VlanID: vlan, ENIMAC: mac, SubnetGW: gw.Unmap(), ParentIndex: int(reply.GetParentIfIndex()), Strict: strict}, nil
}
