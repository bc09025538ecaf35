package rpcgrpc

import (
	"bytes"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// TestMethodNames: the HTTP/2 path of each call is what a reference peer
// dials, so the package, service and method names are part of the wire;
// the plugin's clients (rpc.Method*) call the paths served here.
func TestMethodNames(t *testing.T) {
	for _, c := range [][2]string{
		{CNIBackend_AddNetwork_FullMethodName, "/rpc.CNIBackend/AddNetwork"},
		{CNIBackend_DelNetwork_FullMethodName, "/rpc.CNIBackend/DelNetwork"},
		{rpc.MethodAddNetwork, CNIBackend_AddNetwork_FullMethodName},
		{rpc.MethodDelNetwork, CNIBackend_DelNetwork_FullMethodName},
		{rpc.MethodListAllocations, Inventory_ListAllocations_FullMethodName},
		{rpc.MethodPoolStatus, Inventory_PoolStatus_FullMethodName},
		{rpc.MethodHealthCheck, healthpb.Health_Check_FullMethodName},
		{CNIBackend_ServiceDesc.ServiceName, "rpc.CNIBackend"},
		{Inventory_ServiceDesc.ServiceName, "vpccni.Inventory"},
	} {
		if got, want := c[0], c[1]; got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
	svc := File_ipamd_rpc_rpcgrpc_cnibackend_proto.Services().ByName("CNIBackend")
	if svc == nil || svc.Methods().Len() != 2 {
		t.Fatalf("service descriptor %v", svc)
	}
	for name, io := range map[protoreflect.Name][2]protoreflect.FullName{
		"AddNetwork": {"rpc.AddNetworkRequest", "rpc.AddNetworkReply"},
		"DelNetwork": {"rpc.DelNetworkRequest", "rpc.DelNetworkReply"},
	} {
		m := svc.Methods().ByName(name)
		if m == nil || m.Input().FullName() != io[0] || m.Output().FullName() != io[1] || m.IsStreamingClient() || m.IsStreamingServer() {
			t.Errorf("method %s: %v", name, m)
		}
	}
}

// TestHealthWire: rpc's copies of the health messages encode and decode
// as grpc-go's own, every status value, and their enums agree name for
// number.
func TestHealthWire(t *testing.T) {
	ours, _ := proto.Marshal(&rpc.HealthCheckRequest{Service: "rpc.CNIBackend"})
	theirs, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "rpc.CNIBackend"})
	if !bytes.Equal(ours, theirs) {
		t.Errorf("request % x, grpc-go's % x", ours, theirs)
	}
	values := healthpb.HealthCheckResponse_SERVING.Descriptor().Values()
	if got := rpc.HealthCheckResponse_SERVING.Descriptor().Values(); got.Len() != values.Len() {
		t.Fatalf("%d status values, grpc-go has %d", got.Len(), values.Len())
	}
	for i := 0; i < values.Len(); i++ {
		v := values.Get(i)
		b, _ := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_ServingStatus(v.Number())})
		var got rpc.HealthCheckResponse
		if err := proto.Unmarshal(b, &got); err != nil || int32(got.Status) != int32(v.Number()) || got.Status.String() != string(v.Name()) {
			t.Errorf("%s (%d) read as %v (%v)", v.Name(), v.Number(), got.Status, err)
		}
	}
}
