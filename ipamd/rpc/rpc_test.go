package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestWireContract pins the reference's field numbers and method names:
// renumbering a field breaks interoperability with the reference silently,
// so it must break this test loudly.
func TestWireContract(t *testing.T) {
	want := map[protoreflect.Message]map[string]int{
		(&AddNetworkRequest{}).ProtoReflect(): {"ClientVersion": 8, "K8S_POD_NAME": 1, "K8S_POD_NAMESPACE": 2,
			"K8S_POD_INFRA_CONTAINER_ID": 3, "ContainerID": 7, "IfName": 5, "NetworkName": 6, "Netns": 4, "RequiresMultiNICAttachment": 9},
		(&IPAllocationMetadata{}).ProtoReflect(): {"IPv4Addr": 1, "IPv6Addr": 2, "DeviceNumber": 3, "RouteTableId": 4},
		(&AddNetworkReply{}).ProtoReflect(): {"Success": 1, "IPAllocationMetadata": 2, "UseExternalSNAT": 5, "VPCv4CIDRs": 6,
			"VPCv6CIDRs": 12, "PodVlanId": 7, "PodENIMAC": 8, "PodENISubnetGW": 9, "ParentIfIndex": 10, "NetworkPolicyMode": 13},
		(&DelNetworkRequest{}).ProtoReflect(): {"ClientVersion": 9, "K8S_POD_NAME": 1, "K8S_POD_NAMESPACE": 2,
			"K8S_POD_INFRA_CONTAINER_ID": 3, "Reason": 5, "ContainerID": 8, "IfName": 6, "NetworkName": 7, "K8S_POD_UID": 10},
		(&DelNetworkReply{}).ProtoReflect(): {"Success": 1, "IPAllocationMetadata": 2, "PodVlanId": 4, "NetworkPolicyMode": 6},
	}
	for m, fields := range want {
		d := m.Descriptor()
		if d.Fields().Len() != len(fields) {
			t.Errorf("%s has %d fields, want %d", d.FullName(), d.Fields().Len(), len(fields))
		}
		for name, num := range fields {
			f := d.Fields().ByName(protoreflect.Name(name))
			if f == nil {
				t.Errorf("%s.%s missing", d.FullName(), name)
				continue
			}
			if int(f.Number()) != num {
				t.Errorf("%s.%s = %d, want %d", d.FullName(), name, f.Number(), num)
			}
		}
	}
	if CNIBackend_AddNetwork_FullMethodName != "/rpc.CNIBackend/AddNetwork" || CNIBackend_DelNetwork_FullMethodName != "/rpc.CNIBackend/DelNetwork" {
		t.Errorf("method names %s %s", CNIBackend_AddNetwork_FullMethodName, CNIBackend_DelNetwork_FullMethodName)
	}
}
