package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// ErrCheckFailed: CHECK found the pod's network not as ADD left it.
const ErrCheckFailed uint = 104

// check is CNI CHECK: every kernel object the prevResult records must still
// be there, on the node and in the pod. It changes nothing; the error
// names each missing object.
func (p *Plugin) check(args *skel.CmdArgs) error {
	inv, err := p.begin(args, "CHECK")
	if err != nil {
		return err
	}
	defer inv.end()
	if inv.conf.PrevResult == nil {
		return errorf(types.ErrInvalidNetworkConfig, "CHECK needs the ADD result as prevResult")
	}
	st, err := decodeCleanupState(inv.conf.PrevResult, args.IfName, inv.podNS, inv.podName, inv.conf.VethPrefix)
	if err != nil {
		return err
	}
	if st.Pod.Branch != nil {
		st.Pod.Branch.Strict = inv.conf.PodSGEnforcingMode == ModeStrict
	}
	host, pod, err := p.handles(args.Netns)
	if err != nil {
		return err
	}
	defer closeAll(host, pod)
	if pod == nil {
		return errorf(types.ErrInvalidNetNS, "pod network namespace %q does not exist", args.Netns)
	}
	if err := p.env.Driver.Check(host, pod, st.Pod); err != nil {
		inv.log.Warn("check failed", "error", err)
		return cniError(ErrCheckFailed, "the pod network is not as ADD left it", err)
	}
	return nil
}
