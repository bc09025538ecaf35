package plugin

import (
	"log/slog"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// DelRequest is one parsed DEL: the request, its cleanup state (nil without
// a prevResult) and the namespace handles (Pod is nil when the pod
// namespace is gone or CNI_NETNS is empty). The harness's legacy delete
// policies are written on it, with the same driver, so they differ from
// vpccni's flow only in their decisions.
type DelRequest struct {
	inv   *invocation
	State *CleanupState
	// StateErr is why a prevResult that was there could not be read (a CNI
	// error, code 7); State is then nil.
	StateErr error
	Host     kernel.API
	Pod      kernel.API
	// HostVethIndex is the node-side ifindex of the peer of the sandbox's
	// container interface, read before anything is torn down (0 when the
	// pod namespace is gone): the sandbox's proof to ipamd that a host
	// veth ipamd recovered from the kernel is its own.
	HostVethIndex int
	// Record is the pod as the attachment's node-local record names it
	// (plugin/attachrec; nil without a usable one), read by vpccni's flow.
	// When the pod namespace is gone, the record's host veth ifindex is
	// HostVethIndex.
	Record *driver.Pod
	// leftVeth: the teardown left the veth pair and the release hands it
	// to ipamd (vpccni's flow decides, deleteFlow).
	leftVeth bool
	// node is the node read while ipamd answered, for the first teardown.
	node *driver.NodeView
}

// statePod is the prevResult's pod, nil without one.
func (r *DelRequest) statePod() *driver.Pod {
	if r.State == nil {
		return nil
	}
	return &r.State.Pod
}

// PrepareDel parses a DEL. Bad netconf or CNI_ARGS are CNI errors and
// nothing has been touched when they are returned. A prevResult that
// cannot be read is kept as StateErr: the flow decides what to do without
// it.
func (p *Plugin) PrepareDel(args *skel.CmdArgs) (*DelRequest, error) {
	inv, err := p.begin(args, "DEL")
	if err != nil {
		return nil, err
	}
	r := &DelRequest{inv: inv}
	if inv.conf.PrevResult != nil {
		if r.State, r.StateErr = decodeCleanupState(inv.conf.PrevResult, args.IfName, inv.podNS, inv.podName, inv.conf.VethPrefix); r.StateErr != nil {
			inv.log.Error("prevResult rejected: not a source of what to tear down", "error", r.StateErr)
		}
	}
	r.Host, r.Pod, err = p.handles(args.Netns)
	if err != nil {
		inv.end()
		return nil, err
	}
	if r.Pod != nil {
		if r.HostVethIndex, err = ownership.SandboxVeth(r.Pod, args.IfName); err != nil {
			inv.log.Warn("cannot read the sandbox's container interface; ipamd will get no proof of ownership", "error", err)
		}
	}
	return r, nil
}

// Close releases the request's handles and log.
func (r *DelRequest) Close() {
	closeAll(r.Host, r.Pod)
	r.inv.end()
}

// Log is the request's logger.
func (r *DelRequest) Log() *slog.Logger { return r.inv.log }

// Release asks ipamd, within the deadline, to free the pod's address.
func (p *Plugin) Release(r *DelRequest) (*rpc.DelNetworkReply, Outcome, error) {
	return p.release(background(), r.inv, ReasonPodDeleted, r.HostVethIndex, r.leftVeth)
}

// PodFromDelReply is the pod as ipamd's DelNetwork reply describes it (nil
// when the reply names no address).
func (p *Plugin) PodFromDelReply(r *DelRequest, reply *rpc.DelNetworkReply) (*driver.Pod, error) {
	if reply == nil {
		return nil, nil
	}
	vlan := int(reply.GetPodVlanId())
	ips, _, err := ipsFromMetadata(reply.GetIPAllocationMetadata(), vlan)
	if err != nil || len(ips) == 0 {
		return nil, err
	}
	pod := &driver.Pod{
		HostVeth:    ownership.HostVeth(r.inv.conf.VethPrefix, r.inv.podNS, r.inv.podName),
		ContainerIf: r.inv.args.IfName,
		IPs:         ips,
	}
	if vlan != 0 {
		if vlan > 4094 || !ownership.IsPodTable(vlan+ownership.VlanTableOffset) {
			return nil, errorf(ErrIpamd, "ipamd named VLAN %d", vlan)
		}
		pod.Branch = &driver.Branch{VlanID: vlan}
	}
	return pod, nil
}

// Driver is the plugin's driver (for the harness's policies).
func (p *Plugin) Driver() driver.Networker { return p.env.Driver }

// del is CNI DEL: the request parsed, then decided by vpccni's flow
// (Delete, delflow.go) or the one the harness plugged in.
func (p *Plugin) del(args *skel.CmdArgs) error {
	r, err := p.PrepareDel(args)
	if err != nil {
		return err
	}
	defer r.Close()
	if p.env.DeleteFlow != nil {
		return p.env.DeleteFlow(p, r)
	}
	return p.Delete(r)
}
