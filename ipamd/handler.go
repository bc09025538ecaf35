package ipamd

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// The outcome attribute of every request's log line, one word so logs can
// be counted by it.
const (
	outcomeAssigned   = "assigned"
	outcomeReleased   = "released"
	outcomeHandedOver = "handed-over" // released once its veth is gone (reap.go)
	outcomeInvalid    = "invalid-request"
	outcomeNoIP       = "no-available-ip"
	outcomeUnknownPod = "unknown-pod"
	outcomeNotOwner   = "not-owner"
	outcomeVersion    = "wrong-client-version"
	outcomeError      = "error"
	outcomeCheckpoint = "checkpoint-failed"
)

func (d *Daemon) countAdd(outcome string) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.AddRequest(outcome)
	}
}

func (d *Daemon) countDel(outcome, reason string) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.DelRequest(outcome, reason)
	}
}

// errWrongVersion is the reference's answer to a plugin of another build.
var errWrongVersion = status.Error(codes.FailedPrecondition, "wrong client version")

// handler serves CNIBackend.
type handler struct {
	rpcgrpc.UnimplementedCNIBackendServer
	d *Daemon
}

// versionOK logs and, if so configured, refuses a plugin of another build.
func (h *handler) versionOK(log *slog.Logger, client string) bool {
	if client == h.d.cfg.Version {
		return true
	}
	if h.d.cfg.RejectVersionMismatch {
		log.Warn("request refused", "outcome", outcomeVersion, "serverVersion", h.d.cfg.Version)
		return false
	}
	log.Debug("client version differs from ours; accepted", "serverVersion", h.d.cfg.Version)
	return true
}

func (h *handler) AddNetwork(ctx context.Context, req *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	log := h.d.log.With("op", "AddNetwork", "pod", podName(req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME()),
		"containerID", req.GetContainerID(), "ifName", req.GetIfName(), "netns", req.GetNetns(),
		"clientVersion", req.GetClientVersion())
	if !h.versionOK(log, req.GetClientVersion()) {
		h.d.countAdd(outcomeVersion)
		return nil, errWrongVersion
	}
	// A branch pod's address is its branch ENI's, not the pool's; the
	// reference decides this before it looks at the key.
	if h.d.cfg.PodENI != nil {
		if reply, handled := h.addBranch(ctx, log, req); handled {
			return reply, nil
		}
	}
	// As in the reference, a request ipamd cannot serve is Success=false
	// with no RPC error: the plugin fails the ADD and the runtime retries.
	if req.GetContainerID() == "" || req.GetIfName() == "" || req.GetNetworkName() == "" {
		log.Warn("no address", "outcome", outcomeInvalid, "reason", "ContainerID, IfName and NetworkName are required")
		h.d.countAdd(outcomeInvalid)
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	if req.GetRequiresMultiNICAttachment() {
		// The reference refuses this unless multi-NIC is enabled, and this
		// ipamd knows one network card only.
		log.Warn("no address", "outcome", outcomeInvalid, "reason", "multi-NIC attachment is not supported")
		h.d.countAdd(outcomeInvalid)
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	device := -1
	if h.d.opt.placement != nil {
		if dev, ok := h.d.opt.placement(req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME()); ok {
			device = dev
		}
	}
	family := datastore.IPv4
	if h.d.cfg.IPv6 {
		family = datastore.IPv6
	}
	a, err := h.d.store.Assign(key(req.GetNetworkName(), req.GetContainerID(), req.GetIfName()),
		datastore.Meta{PodNamespace: req.GetK8S_POD_NAMESPACE(), PodName: req.GetK8S_POD_NAME(), Netns: req.GetNetns()},
		family, device)
	if err != nil {
		outcome := outcomeError
		if errors.Is(err, datastore.ErrNoAvailableIP) {
			outcome = outcomeNoIP
		}
		log.Warn("no address", "outcome", outcome, "error", err)
		h.d.countAdd(outcome)
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	if err := h.d.fault(ctx, FailAddBeforeCheckpoint); err != nil {
		return nil, err
	}
	if err := h.d.commit(ctx); err != nil {
		// The pod must not get an address a crash would forget: the
		// reference undoes the assignment too.
		h.d.store.Undo(a)
		log.Error("no address: the checkpoint could not be written", "outcome", outcomeCheckpoint, "ip", a.IP, "error", err)
		h.d.countAdd(outcomeCheckpoint)
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	if err := h.d.fault(ctx, FailAddBeforeReply); err != nil {
		return nil, err
	}
	log.Info("address assigned", "outcome", outcomeAssigned, "ip", a.IP, "device", a.DeviceNumber, "table", a.RouteTable)
	h.d.countAdd(outcomeAssigned)
	reply := &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{metadata(a)}}
	h.d.vpcFields(reply)
	return reply, nil
}

func (h *handler) DelNetwork(ctx context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	log := h.d.log.With("op", "DelNetwork", "pod", podName(req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME()),
		"containerID", req.GetContainerID(), "ifName", req.GetIfName(), "reason", req.GetReason(),
		"clientVersion", req.GetClientVersion())
	if !h.versionOK(log, req.GetClientVersion()) {
		h.d.countDel(outcomeVersion, req.GetReason())
		return nil, errWrongVersion
	}
	k := key(req.GetNetworkName(), req.GetContainerID(), req.GetIfName())
	meta := datastore.Meta{PodNamespace: req.GetK8S_POD_NAMESPACE(), PodName: req.GetK8S_POD_NAME(), HostVethIndex: int(req.GetHostVethIndex())}
	if req.GetDeleteHostVeth() && meta.HostVethIndex > 0 && h.d.canTakeVeths() {
		if reply, err, done := h.handOver(ctx, log, req, k, meta); done {
			return reply, err
		}
		// Nothing to hand over to (unknown pod, another sandbox's): the
		// release below answers as it would.
	}
	a, err := h.d.store.Release(k, meta)
	var notOwner *datastore.NotOwnerError
	if errors.As(err, &notOwner) {
		// The pod's address was recovered from the kernel and this sandbox
		// did not prove the recovered veth is its own: a late DEL of an
		// old sandbox of the same pod must not free the live one's address.
		log.Warn("release refused: the address was recovered from the kernel for another sandbox of the pod",
			"outcome", outcomeNotOwner, "ip", notOwner.Held.IP, "heldByHostVeth", notOwner.Held.Key.ContainerID,
			"heldByIfindex", notOwner.Held.Meta.HostVethIndex, "askingIfindex", notOwner.Claimed)
		h.d.countDel(outcomeNotOwner, req.GetReason())
		return nil, status.Error(codes.NotFound, datastore.ErrUnknownPod.Error()+": "+notOwner.Error())
	}
	if errors.Is(err, datastore.ErrUnknownPod) && h.d.cfg.PodENI != nil {
		// The pool never held a branch pod's address: ask who it is.
		if reply, handled, err := h.delBranch(ctx, log, req); handled {
			return reply, err
		}
	}
	if errors.Is(err, datastore.ErrUnknownPod) {
		log.Info("nothing to release", "outcome", outcomeUnknownPod)
		h.d.countDel(outcomeUnknownPod, req.GetReason())
		// A status error, unlike the reference's plain error (which gRPC
		// turns into Unknown): vpccni's plugin checks the code, the
		// reference's plugin the text, and both find what they look for.
		return nil, status.Error(codes.NotFound, datastore.ErrUnknownPod.Error())
	}
	if err != nil {
		log.Error("release failed", "outcome", outcomeError, "error", err)
		h.d.countDel(outcomeError, req.GetReason())
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := h.d.fault(ctx, FailDelBeforeCheckpoint); err != nil {
		return nil, err
	}
	if err := h.d.commit(ctx); err != nil {
		// Keep the address held so the retried DEL finds it again.
		if rerr := h.d.store.Reinstate(a); rerr != nil {
			log.Error("release not persisted and not undone", "ip", a.IP, "error", rerr)
		}
		log.Error("release not persisted; kept", "outcome", outcomeCheckpoint, "ip", a.IP, "error", err)
		h.d.countDel(outcomeCheckpoint, req.GetReason())
		return nil, status.Error(codes.Unavailable, "checkpoint write failed: "+err.Error())
	}
	if req.GetK8S_POD_NAME() == "" {
		// An old or foreign plugin may not say who the pod is; the
		// allocation remembers.
		log = log.With("heldBy", podName(a.Meta.PodNamespace, a.Meta.PodName))
	}
	if err := h.d.fault(ctx, FailDelBeforeReply); err != nil {
		return nil, err
	}
	log.Info("address released", "outcome", outcomeReleased, "ip", a.IP, "device", a.DeviceNumber, "table", a.RouteTable)
	h.d.countDel(outcomeReleased, req.GetReason())
	return &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{metadata(a)}}, nil
}

func podName(ns, name string) string {
	if ns == "" && name == "" {
		return ""
	}
	return ns + "/" + name
}

func key(network, containerID, ifName string) datastore.Key {
	return datastore.Key{NetworkName: network, ContainerID: containerID, IfName: ifName}
}

// metadata is the wire form of an allocation.
func metadata(a datastore.Allocation) *rpc.IPAllocationMetadata {
	m := &rpc.IPAllocationMetadata{DeviceNumber: int32(a.DeviceNumber), RouteTableId: int32(a.RouteTable)}
	if a.IP.Is4() {
		m.IPv4Addr = a.IP.String()
	} else {
		m.IPv6Addr = a.IP.String()
	}
	return m
}
