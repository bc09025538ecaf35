package ipamd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// Outcomes of the branch-ENI decisions (security groups for pods).
const (
	outcomeBranchAssigned = "branch-eni-assigned"
	outcomeBranchReleased = "branch-eni-released"
	outcomeBranchLookup   = "pod-eni-lookup-failed"
	outcomeBranchInvalid  = "invalid-pod-eni"
	outcomeNoTrunk        = "no-trunk"
	outcomePodGone        = "pod-gone"
)

// podENILookupTimeout caps one pod lookup when the plugin's call has no
// deadline of its own: a hung API server must not hold a CNI ADD forever.
const podENILookupTimeout = 10 * time.Second

// lookupPod asks the Source, bounded by the call's context.
func (h *handler) lookupPod(ctx context.Context, namespace, name string) (*podeni.BranchENI, error) {
	ctx, cancel := context.WithTimeout(ctx, podENILookupTimeout)
	defer cancel()
	return h.d.cfg.PodENI.Lookup(ctx, namespace, name)
}

// addBranch answers AddNetwork for a branch pod; handled is false for a
// regular pod, which then gets an address from the pool. As in the
// reference, anything that keeps a branch pod from its VLAN (a failed
// lookup, no trunk, an unusable annotation) is Success=false with no RPC
// error: the plugin fails the ADD and the runtime retries it.
func (h *handler) addBranch(ctx context.Context, log *slog.Logger, req *rpc.AddNetworkRequest) (_ *rpc.AddNetworkReply, handled bool) {
	fail := &rpc.AddNetworkReply{Success: false}
	b, err := h.lookupPod(ctx, req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME())
	if err != nil {
		log.Warn("no address: cannot tell whether the pod has a branch ENI", "outcome", outcomeBranchLookup, "error", err)
		h.d.countAdd(outcomeBranchLookup)
		h.d.cfg.Metrics.PodENIError(metrics.PodENILookup)
		return fail, true
	}
	if b == nil {
		log.Debug("not a branch-ENI pod")
		return nil, false
	}
	log = log.With("vlan", b.VlanID, "eni", b.ENIID, "mac", b.MAC.String())
	if req.GetRequiresMultiNICAttachment() {
		// The reference serves a branch pod one interface whatever it asks.
		log.Info("branch-ENI pods get one interface; multi-NIC attachment ignored")
	}
	if _, ok := h.d.inst.Trunk(); !ok {
		log.Warn("no address for a branch-ENI pod", "outcome", outcomeNoTrunk, "reason", "the instance has no trunk ENI")
		h.d.countAdd(outcomeNoTrunk)
		h.d.cfg.Metrics.PodENIError(metrics.PodENINoTrunk)
		return fail, true
	}
	parent, err := h.trunkIndex()
	if err != nil {
		log.Warn("no address for a branch-ENI pod", "outcome", outcomeNoTrunk, "error", err)
		h.d.countAdd(outcomeNoTrunk)
		h.d.cfg.Metrics.PodENIError(metrics.PodENINoTrunk)
		return fail, true
	}
	ip, gw, err := b.Addressing(h.d.cfg.IPv6)
	if err != nil {
		log.Warn("no address for a branch-ENI pod", "outcome", outcomeBranchInvalid, "error", err)
		h.d.countAdd(outcomeBranchInvalid)
		h.d.cfg.Metrics.PodENIError(metrics.PodENIInvalid)
		return fail, true
	}
	// DeviceNumber -1 and table 0: the address is on no ENI of the pool
	// (the plugin routes it through the VLAN's own table).
	md := &rpc.IPAllocationMetadata{DeviceNumber: -1, RouteTableId: 0}
	if ip.Is4() {
		md.IPv4Addr = ip.String()
	} else {
		md.IPv6Addr = ip.String()
	}
	log.Info("branch ENI assigned", "outcome", outcomeBranchAssigned, "ip", ip, "gateway", gw, "parentIfIndex", parent)
	h.d.countAdd(outcomeBranchAssigned)
	return &rpc.AddNetworkReply{
		Success:              true,
		IPAllocationMetadata: []*rpc.IPAllocationMetadata{md},
		PodVlanId:            int32(b.VlanID),
		PodENIMAC:            b.MAC.String(),
		PodENISubnetGW:       gw.String(),
		ParentIfIndex:        int32(parent),
	}, true
}

// trunkIndex is the trunk ENI's link index, or why it is unknown.
func (h *handler) trunkIndex() (int, error) {
	if h.d.cfg.TrunkLinkIndex == nil {
		return 0, errors.New("the trunk ENI's link index is unknown (no TrunkLinkIndex configured)")
	}
	idx, err := h.d.cfg.TrunkLinkIndex()
	if err != nil {
		return 0, fmt.Errorf("the trunk ENI's link index: %w", err)
	}
	if idx <= 0 {
		return 0, fmt.Errorf("the trunk ENI's link index is %d, not a link", idx)
	}
	return idx, nil
}

// delBranch answers DelNetwork for a key the datastore does not hold;
// handled is false for a regular pod, which then gets the usual "unknown
// pod". A branch pod gets its VLAN and address back so the plugin can
// tear it down; a pod the API server no longer has is a success with
// nothing to tear down, as in the reference (its plugin then does
// nothing); a lookup that fails is an Internal error, on which the plugin
// tears down from its own state.
func (h *handler) delBranch(ctx context.Context, log *slog.Logger, req *rpc.DelNetworkRequest) (_ *rpc.DelNetworkReply, handled bool, _ error) {
	b, err := h.lookupPod(ctx, req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME())
	if errors.Is(err, podeni.ErrPodNotFound) {
		log.Info("not in the datastore and the pod is gone: nothing to release", "outcome", outcomePodGone, "error", err)
		h.d.countDel(outcomePodGone, req.GetReason())
		return &rpc.DelNetworkReply{Success: true}, true, nil
	}
	if err != nil {
		log.Error("not in the datastore and cannot tell whether the pod has a branch ENI", "outcome", outcomeBranchLookup, "error", err)
		h.d.countDel(outcomeBranchLookup, req.GetReason())
		h.d.cfg.Metrics.PodENIError(metrics.PodENILookup)
		return nil, true, status.Error(codes.Internal, err.Error())
	}
	if b == nil {
		log.Debug("not a branch-ENI pod either")
		return nil, false, nil
	}
	log = log.With("vlan", b.VlanID, "eni", b.ENIID, "mac", b.MAC.String())
	ip, family := b.IPv4, "IPv4"
	if h.d.cfg.IPv6 {
		ip, family = b.IPv6, "IPv6"
	}
	err = b.Validate()
	if err == nil && !ip.IsValid() {
		err = fmt.Errorf("the branch ENI has no %s address", family)
	}
	if err != nil {
		err = fmt.Errorf("pod %s/%s: %w", req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME(), err)
		log.Error("branch-ENI pod with an unusable branch ENI", "outcome", outcomeBranchInvalid, "error", err)
		h.d.countDel(outcomeBranchInvalid, req.GetReason())
		h.d.cfg.Metrics.PodENIError(metrics.PodENIInvalid)
		return nil, true, status.Error(codes.Internal, err.Error())
	}
	md := &rpc.IPAllocationMetadata{}
	if ip.Is4() {
		md.IPv4Addr = ip.String()
	} else {
		md.IPv6Addr = ip.String()
	}
	log.Info("branch ENI released", "outcome", outcomeBranchReleased, "ip", ip)
	h.d.countDel(outcomeBranchReleased, req.GetReason())
	return &rpc.DelNetworkReply{Success: true, PodVlanId: int32(b.VlanID), IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, true, nil
}

// trunkAttr describes the trunk ENI for the startup line.
func trunkAttr(e cloud.ENI, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%s (%s, device %d)", e.ID, e.MAC, e.DeviceNumber)
}
