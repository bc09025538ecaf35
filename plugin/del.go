package plugin

import (
	"errors"
	"log/slog"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

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
	Host  kernel.API
	Pod   kernel.API
	// HostVethIndex is the node-side ifindex of the peer of the sandbox's
	// container interface, read before anything is torn down (0 when the
	// pod namespace is gone): the sandbox's proof to ipamd that a host
	// veth ipamd recovered from the kernel is its own.
	HostVethIndex int
}

// PrepareDel parses a DEL. Bad netconf, CNI_ARGS or prevResult are CNI
// errors and nothing has been touched when they are returned.
func (p *Plugin) PrepareDel(args *skel.CmdArgs) (*DelRequest, error) {
	inv, err := p.begin(args, "DEL")
	if err != nil {
		return nil, err
	}
	r := &DelRequest{inv: inv}
	if inv.conf.PrevResult != nil {
		r.State, err = decodeCleanupState(inv.conf.PrevResult, args.IfName, inv.podNS, inv.podName, inv.conf.VethPrefix)
		if err != nil {
			inv.log.Error("rejected prevResult; touching nothing", "error", err)
			inv.end()
			return nil, err
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
	return p.release(background(), r.inv, ReasonPodDeleted, r.HostVethIndex)
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

// del is vpccni's delete flow (docs/architecture.md#the-delete-flow):
//
//   - With a prevResult, tear the pod down from it first, then ask ipamd to
//     release. Tearing down first means the address is never back in the
//     pool while its rules are still in the kernel; a failed teardown
//     returns an error (the runtime retries) and keeps the address.
//   - Without one, ask ipamd and tear down from its reply; when ipamd cannot
//     say (unreachable, timeout, unknown pod, error), read the pod's objects
//     back from its namespace if it still exists.
//   - No ipamd outcome ever stops a teardown; an address ipamd missed is
//     ipamd's to reclaim.
//   - Success means nothing of the pod that the plugin can know of is left.
func (p *Plugin) del(args *skel.CmdArgs) error {
	r, err := p.PrepareDel(args)
	if err != nil {
		return err
	}
	defer r.Close()
	return p.Delete(r)
}

// Delete runs vpccni's delete flow on a prepared request (Del is PrepareDel
// plus Delete; the harness calls Delete as its "default" policy).
func (p *Plugin) Delete(r *DelRequest) error {
	log := r.inv.log
	if r.State != nil {
		rep, err := p.env.Driver.Teardown(r.Host, r.Pod, r.State.Pod)
		if err != nil {
			log.Error("teardown from prevResult failed; keeping the address in ipamd so the retry finds it", "removed", rep.Removed, "notes", rep.Notes, "error", err)
			return teardownError("prevResult", err)
		}
		log.Info("torn down from prevResult", "removed", rep.Removed, "skipped", rep.Skipped, "notes", rep.Notes)
		reply, out, rerr := p.Release(r)
		if rerr != nil {
			if out == OutcomeUnknownPod {
				log.Info("ipamd holds no address for the pod (unknown pod): nothing to release; the pod is torn down", "outcome", out)
				return nil
			}
			log.Warn("ipamd did not release the address: the pod is torn down, the address stays allocated in ipamd until ipamd forgets or reconciles it", "outcome", out, "error", rerr)
			return nil
		}
		// ipamd may know of addresses the prevResult did not record.
		extra, err := p.PodFromDelReply(r, reply)
		if err != nil || extra == nil {
			return nil
		}
		extra.IPs = missingIPs(extra.IPs, r.State.Pod.IPs)
		if len(extra.IPs) == 0 {
			return nil
		}
		if rep, err := p.env.Driver.Teardown(r.Host, r.Pod, *extra); err != nil {
			return teardownError("ipamd's reply", err)
		} else {
			log.Info("torn down addresses only ipamd knew", "removed", rep.Removed)
		}
		return nil
	}

	reply, out, rerr := p.Release(r)
	var src *driver.Pod
	source := "ipamd"
	if rerr == nil {
		var err error
		if src, err = p.PodFromDelReply(r, reply); err != nil {
			log.Warn("ignoring ipamd's reply", "error", err)
		}
	} else {
		log.Warn("ipamd cannot say what the pod had", "outcome", out, "error", rerr)
	}
	if src == nil {
		source = "pod namespace"
		var err error
		if src, err = p.env.Driver.Inspect(r.Host, r.Pod, r.inv.args.IfName); err != nil {
			return cniError(types.ErrTryAgainLater, "cannot read the pod's network back", err)
		}
	}
	if src == nil {
		log.Info("nothing of the pod is left to tear down", "ipamd", out)
		return nil
	}
	rep, err := p.env.Driver.Teardown(r.Host, r.Pod, *src)
	if err != nil {
		log.Error("teardown failed", "source", source, "removed", rep.Removed, "notes", rep.Notes, "error", err)
		return teardownError(source, err)
	}
	log.Info("torn down", "source", source, "ipamd", out, "removed", rep.Removed, "skipped", rep.Skipped, "notes", rep.Notes)
	return nil
}

// teardownError is a failed teardown as the runtime sees it. A source that
// names an address the node does not show to be a pod's (a forged or stale
// prevResult, a confused ipamd) is refused with code 7, naming what the
// node says instead, and nothing of that address was touched; any other
// failure is code 11: the runtime retries the DEL.
func teardownError(source string, err error) error {
	var notPod *driver.NotPodAddressError
	if errors.As(err, &notPod) {
		return types.NewError(types.ErrInvalidNetworkConfig, "the "+source+" names an address this node does not show to be a pod's", err.Error())
	}
	return cniError(types.ErrTryAgainLater, "pod teardown incomplete, retry", err)
}

func missingIPs(have, known []driver.PodIP) []driver.PodIP {
	var out []driver.PodIP
	for _, h := range have {
		found := false
		for _, k := range known {
			found = found || k.Addr == h.Addr
		}
		if !found {
			out = append(out, h)
		}
	}
	return out
}
