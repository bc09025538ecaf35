package rpc

import (
	"context"

	"google.golang.org/protobuf/proto"
)

// The HTTP/2 paths of the calls: the proto package, service and method
// names, which are part of the wire (rpcgrpc's tests hold them equal to
// the generated ones).
const (
	MethodAddNetwork      = "/rpc.CNIBackend/AddNetwork"
	MethodDelNetwork      = "/rpc.CNIBackend/DelNetwork"
	MethodListAllocations = "/vpccni.Inventory/ListAllocations"
	MethodPoolStatus      = "/vpccni.Inventory/PoolStatus"
	// MethodHealthCheck is the standard gRPC health service's Check.
	MethodHealthCheck = "/grpc.health.v1.Health/Check"
)

// Invoker makes one unary call: in marshalled to method, its answer
// unmarshalled into out. The plugin's (internal/unarygrpc) links no gRPC
// runtime; rpcgrpc.Invoker adapts a grpc-go connection.
type Invoker interface {
	Invoke(ctx context.Context, method string, in, out proto.Message) error
}

// CNIBackendClient is the plugin's side of the CNIBackend service.
type CNIBackendClient interface {
	AddNetwork(ctx context.Context, in *AddNetworkRequest) (*AddNetworkReply, error)
	DelNetwork(ctx context.Context, in *DelNetworkRequest) (*DelNetworkReply, error)
}

// InventoryClient is the plugin's side of vpccni's Inventory service.
type InventoryClient interface {
	ListAllocations(ctx context.Context, in *ListAllocationsRequest) (*ListAllocationsReply, error)
	PoolStatus(ctx context.Context, in *PoolStatusRequest) (*PoolStatusReply, error)
}

// HealthClient is the plugin's side of the standard health service.
type HealthClient interface {
	Check(ctx context.Context, in *HealthCheckRequest) (*HealthCheckResponse, error)
}

// NewCNIBackendClient, NewInventoryClient and NewHealthClient make each
// call through inv.
func NewCNIBackendClient(inv Invoker) CNIBackendClient { return client{inv} }
func NewInventoryClient(inv Invoker) InventoryClient   { return client{inv} }
func NewHealthClient(inv Invoker) HealthClient         { return client{inv} }

type client struct{ inv Invoker }

func call[Out any, POut interface {
	*Out
	proto.Message
}](ctx context.Context, inv Invoker, method string, in proto.Message) (POut, error) {
	out := POut(new(Out))
	if err := inv.Invoke(ctx, method, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (c client) AddNetwork(ctx context.Context, in *AddNetworkRequest) (*AddNetworkReply, error) {
	return call[AddNetworkReply](ctx, c.inv, MethodAddNetwork, in)
}

func (c client) DelNetwork(ctx context.Context, in *DelNetworkRequest) (*DelNetworkReply, error) {
	return call[DelNetworkReply](ctx, c.inv, MethodDelNetwork, in)
}

func (c client) ListAllocations(ctx context.Context, in *ListAllocationsRequest) (*ListAllocationsReply, error) {
	return call[ListAllocationsReply](ctx, c.inv, MethodListAllocations, in)
}

func (c client) PoolStatus(ctx context.Context, in *PoolStatusRequest) (*PoolStatusReply, error) {
	return call[PoolStatusReply](ctx, c.inv, MethodPoolStatus, in)
}

func (c client) Check(ctx context.Context, in *HealthCheckRequest) (*HealthCheckResponse, error) {
	return call[HealthCheckResponse](ctx, c.inv, MethodHealthCheck, in)
}
