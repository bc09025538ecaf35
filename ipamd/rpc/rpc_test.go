package rpc

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

type field struct {
	num      protoreflect.FieldNumber
	kind     protoreflect.Kind
	repeated bool
}

var (
	str  = field{kind: protoreflect.StringKind}
	i32  = field{kind: protoreflect.Int32Kind}
	flag = field{kind: protoreflect.BoolKind}
)

func (f field) n(num int) field { f.num = protoreflect.FieldNumber(num); return f }
func (f field) list() field     { f.repeated = true; return f }

// wire is the reference's contract (docs/reference-facts.md#grpc-service): every message with
// every field's number, type and cardinality. Renumbering or retyping a
// field breaks interoperability with the reference without any compile
// error on either side, so it must break this test.
var wire = map[protoreflect.FullName]map[protoreflect.Name]field{
	"rpc.AddNetworkRequest": {
		"ClientVersion": str.n(8), "K8S_POD_NAME": str.n(1), "K8S_POD_NAMESPACE": str.n(2),
		"K8S_POD_INFRA_CONTAINER_ID": str.n(3), "ContainerID": str.n(7), "IfName": str.n(5),
		"NetworkName": str.n(6), "Netns": str.n(4), "RequiresMultiNICAttachment": flag.n(9),
	},
	"rpc.IPAllocationMetadata": {
		"IPv4Addr": str.n(1), "IPv6Addr": str.n(2), "DeviceNumber": i32.n(3), "RouteTableId": i32.n(4),
	},
	"rpc.AddNetworkReply": {
		"Success": flag.n(1), "IPAllocationMetadata": {num: 2, kind: protoreflect.MessageKind, repeated: true},
		"UseExternalSNAT": flag.n(5), "VPCv4CIDRs": str.n(6).list(), "VPCv6CIDRs": str.n(12).list(),
		"PodVlanId": i32.n(7), "PodENIMAC": str.n(8), "PodENISubnetGW": str.n(9), "ParentIfIndex": i32.n(10),
		"NetworkPolicyMode": str.n(13),
	},
	"rpc.DelNetworkRequest": {
		"ClientVersion": str.n(9), "K8S_POD_NAME": str.n(1), "K8S_POD_NAMESPACE": str.n(2),
		"K8S_POD_INFRA_CONTAINER_ID": str.n(3), "Reason": str.n(5), "ContainerID": str.n(8),
		"IfName": str.n(6), "NetworkName": str.n(7), "K8S_POD_UID": str.n(10),
		// vpccni's additions, far from the reference's numbers.
		"HostVethIndex": i32.n(1001), "DeleteHostVeth": flag.n(1002),
	},
	"rpc.DelNetworkReply": {
		"Success": flag.n(1), "IPAllocationMetadata": {num: 2, kind: protoreflect.MessageKind, repeated: true},
		"PodVlanId": i32.n(4), "NetworkPolicyMode": str.n(6),
		// vpccni's addition.
		"HostVethTaken": flag.n(1002),
	},
}

func TestWireFields(t *testing.T) {
	msgs := []proto.Message{&AddNetworkRequest{}, &IPAllocationMetadata{}, &AddNetworkReply{}, &DelNetworkRequest{}, &DelNetworkReply{}}
	seen := map[protoreflect.FullName]bool{}
	for _, m := range msgs {
		d := m.ProtoReflect().Descriptor()
		seen[d.FullName()] = true
		want, ok := wire[d.FullName()]
		if !ok {
			t.Errorf("unexpected message %s", d.FullName())
			continue
		}
		if d.Fields().Len() != len(want) {
			t.Errorf("%s has %d fields, want %d", d.FullName(), d.Fields().Len(), len(want))
		}
		for name, w := range want {
			f := d.Fields().ByName(name)
			if f == nil {
				t.Errorf("%s.%s missing", d.FullName(), name)
				continue
			}
			got := field{num: f.Number(), kind: f.Kind(), repeated: f.Cardinality() == protoreflect.Repeated}
			if got != w {
				t.Errorf("%s.%s = %+v, want %+v", d.FullName(), name, got, w)
			}
		}
	}
	for name := range wire {
		if !seen[name] {
			t.Errorf("message %s not generated", name)
		}
	}
	if f := (&AddNetworkReply{}).ProtoReflect().Descriptor().Fields().ByName("IPAllocationMetadata"); f.Message().FullName() != "rpc.IPAllocationMetadata" {
		t.Errorf("AddNetworkReply.IPAllocationMetadata is %s", f.Message().FullName())
	}
}

// TestWireBytes checks one encoding by hand, independently of the
// descriptors: field 8 (ClientVersion) of AddNetworkRequest, length-
// delimited, is the tag byte 8<<3|2 = 0x42.
func TestWireBytes(t *testing.T) {
	b, err := proto.Marshal(&AddNetworkRequest{ClientVersion: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x42, 0x01, 'v'}; !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
	b, _ = proto.Marshal(&DelNetworkRequest{K8S_POD_UID: "u"}) // field 10: 10<<3|2 = 0x52
	if want := []byte{0x52, 0x01, 'u'}; !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
}
