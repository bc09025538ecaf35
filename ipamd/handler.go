package ipamd

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// handler serves CNIBackend.
type handler struct {
	rpc.UnimplementedCNIBackendServer
	d *Daemon
}

func (h *handler) checkVersion(v string) error {
	if v != h.d.cfg.Version {
		if h.d.cfg.RejectVersionMismatch {
			return status.Errorf(codes.FailedPrecondition, "wrong client version %q (server %q)", v, h.d.cfg.Version)
		}
		h.d.log.Debug("client version differs", "client", v, "server", h.d.cfg.Version)
	}
	return nil
}

func (h *handler) AddNetwork(_ context.Context, req *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	if err := h.checkVersion(req.GetClientVersion()); err != nil {
		return nil, err
	}
	log := h.d.log.With("op", "AddNetwork", "pod", req.GetK8S_POD_NAMESPACE()+"/"+req.GetK8S_POD_NAME(),
		"containerID", req.GetContainerID(), "ifName", req.GetIfName())
	if req.GetContainerID() == "" || req.GetIfName() == "" || req.GetNetworkName() == "" {
		// As the reference: an unusable key is Success=false, not an RPC error.
		log.Warn("rejected: ContainerID, IfName and NetworkName are required")
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	device := -1
	if h.d.cfg.Placement != nil {
		if dev, ok := h.d.cfg.Placement(req.GetK8S_POD_NAMESPACE(), req.GetK8S_POD_NAME()); ok {
			device = dev
		}
	}
	a, err := h.d.store.Assign(key(req.GetNetworkName(), req.GetContainerID(), req.GetIfName()),
		datastore.Meta{PodNamespace: req.GetK8S_POD_NAMESPACE(), PodName: req.GetK8S_POD_NAME()}, device)
	if err != nil {
		log.Warn("no address", "error", err)
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	log.Info("assigned", "ip", a.IP, "device", a.DeviceNumber, "table", a.RouteTable)
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{metadata(a)}}, nil
}

func (h *handler) DelNetwork(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	if err := h.checkVersion(req.GetClientVersion()); err != nil {
		return nil, err
	}
	log := h.d.log.With("op", "DelNetwork", "pod", req.GetK8S_POD_NAMESPACE()+"/"+req.GetK8S_POD_NAME(),
		"containerID", req.GetContainerID(), "ifName", req.GetIfName(), "reason", req.GetReason())
	a, err := h.d.store.Release(key(req.GetNetworkName(), req.GetContainerID(), req.GetIfName()))
	if errors.Is(err, datastore.ErrUnknownPod) {
		log.Info("unknown pod")
		// NotFound for vpccni's plugin; the reference's plugin matches the
		// text.
		return nil, status.Error(codes.NotFound, datastore.ErrUnknownPod.Error())
	}
	if err != nil {
		log.Error("release failed", "error", err)
		return nil, status.Error(codes.Internal, err.Error())
	}
	log.Info("released", "ip", a.IP, "device", a.DeviceNumber)
	return &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{metadata(a)}}, nil
}

func key(network, containerID, ifName string) datastore.Key {
	return datastore.Key{NetworkName: network, ContainerID: containerID, IfName: ifName}
}

func metadata(a datastore.Allocation) *rpc.IPAllocationMetadata {
	m := &rpc.IPAllocationMetadata{DeviceNumber: int32(a.DeviceNumber), RouteTableId: int32(a.RouteTable)}
	if a.IP.Is4() {
		m.IPv4Addr = a.IP.String()
	} else {
		m.IPv6Addr = a.IP.String()
	}
	return m
}
