package ipamd

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// handOver is DelNetwork for a DEL that leaves the pod's veth pair to
// ipamd (DeleteHostVeth): the allocation is marked releasing and written
// to the checkpoint before the plugin is answered, so a restart still
// knows to delete the veth and release the address; the reaper does both
// (reap.go). done is false when the key holds nothing this sandbox may
// release: DelNetwork's ordinary release then answers.
func (h *handler) handOver(ctx context.Context, log *slog.Logger, req *rpc.DelNetworkRequest, k datastore.Key,
	meta datastore.Meta) (_ *rpc.DelNetworkReply, _ error, done bool) {
	prev, err := h.d.store.HandOver(k, meta)
	if err != nil {
		return nil, nil, false
	}
	if err := h.d.fault(ctx, FailDelBeforeCheckpoint); err != nil {
		return nil, err, true
	}
	if err := h.d.commit(ctx); err != nil {
		h.d.store.UndoHandOver(prev)
		log.Error("hand-over not persisted; kept as it was", "outcome", outcomeCheckpoint, "ip", prev.IP, "error", err)
		h.d.countDel(outcomeCheckpoint, req.GetReason())
		return nil, status.Error(codes.Unavailable, "checkpoint write failed: "+err.Error()), true
	}
	if err := h.d.fault(ctx, FailDelBeforeReply); err != nil {
		return nil, err, true
	}
	h.d.wakeReaper()
	log.Info("address held until its pod's veth is deleted", "outcome", outcomeHandedOver, "ip", prev.IP,
		"hostVethIndex", meta.HostVethIndex, "device", prev.DeviceNumber, "table", prev.RouteTable)
	h.d.countDel(outcomeHandedOver, req.GetReason())
	return &rpc.DelNetworkReply{Success: true, HostVethTaken: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{metadata(prev)}}, nil, true
}
