package ipamd

import (
	"context"

	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// inventory serves vpccni's Inventory service (the plugin's GC and STATUS).
type inventory struct {
	rpcgrpc.UnimplementedInventoryServer
	d *Daemon
}

func (s *inventory) ListAllocations(_ context.Context, req *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	out := &rpc.ListAllocationsReply{}
	if req.GetContainerId() != "" {
		// One attachment: what its DelNetwork would release.
		a, err := s.d.store.Owned(key(req.GetNetworkName(), req.GetContainerId(), req.GetIfName()),
			datastore.Meta{PodNamespace: req.GetPodNamespace(), PodName: req.GetPodName(), HostVethIndex: int(req.GetHostVethIndex())})
		if err == nil {
			out.Allocations = append(out.Allocations, wire(a))
		}
		return out, nil
	}
	for _, a := range s.d.store.Allocations() {
		if req.GetNetworkName() != "" && a.Key.NetworkName != req.GetNetworkName() && !a.Key.Recovered() {
			continue
		}
		out.Allocations = append(out.Allocations, wire(a))
	}
	return out, nil
}

// wire is an allocation in the Inventory's form.
func wire(a datastore.Allocation) *rpc.Allocation {
	return &rpc.Allocation{
		NetworkName: a.Key.NetworkName, ContainerId: a.Key.ContainerID, IfName: a.Key.IfName, Ip: a.IP.String(),
		PodNamespace: a.Meta.PodNamespace, PodName: a.Meta.PodName,
		DeviceNumber: int32(a.DeviceNumber), RouteTable: int32(a.RouteTable), Recovered: a.Key.Recovered(),
		Netns: a.Meta.Netns, HostVethIndex: int32(a.Meta.HostVethIndex),
	}
}

func (s *inventory) PoolStatus(context.Context, *rpc.PoolStatusRequest) (*rpc.PoolStatusReply, error) {
	st := s.d.store.Stats()
	if s.d.cfg.IPv6 {
		return &rpc.PoolStatusReply{Available: int32(max(st.TotalIPv6-st.Assigned, 0)), Total: int32(st.TotalIPv6), Ipv6: true}, nil
	}
	return &rpc.PoolStatusReply{Available: int32(st.Available()), Total: int32(st.Total)}, nil
}
