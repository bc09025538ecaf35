package cloud_test

import (
	"context"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/cloud"
)

// TestInstanceMergesIMDSAndEC2: ENIs come from IMDS sorted by device;
// absent ipv4-prefix means none; EC2 marks the trunk and its address
// lists win over IMDS's.
func TestInstanceMergesIMDSAndEC2(t *testing.T) {
	api, md := newMocks(t)
	keys := nodeIMDS(map[string][3]string{
		"02:00:00:00:02:01": {"2", "eni-0trunk", "10.0.1.30"},
		"02:00:00:00:01:01": {"1", "eni-0second", "10.0.1.20\n10.0.1.21"},
	})
	keys[macKey(primaryMAC, "ipv6-prefix")] = "2600:1f14:a:1::/80"
	keys[macKey("02:00:00:00:01:01", "ipv4-prefix")] = "10.0.1.32/28"
	fakeIMDS(md, keys, nil)
	trunk := attachedENI("eni-0trunk", 2, "10.0.1.30")
	trunk.InterfaceType = types.NetworkInterfaceTypeTrunk
	second := attachedENI("eni-0second", 1, "10.0.1.20", "10.0.1.21", "10.0.1.22") // IMDS lags on .22
	second.Ipv4Prefixes = []types.Ipv4PrefixSpecification{{Ipv4Prefix: aws.String("10.0.1.32/28")}}
	primary := attachedENI("eni-0prim", 0, "10.0.1.10", "10.0.1.11")
	primary.Ipv6Prefixes = []types.Ipv6PrefixSpecification{{Ipv6Prefix: aws.String("2600:1f14:a:1::/80")}}
	expectAttached(api, trunk, primary, second)

	inst, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	base := cloud.ENI{SubnetID: subnetID, Subnet: p("10.0.1.0/24"), Gateway: a("10.0.1.1")}
	with := func(e cloud.ENI, f func(*cloud.ENI)) cloud.ENI { f(&e); return e }
	want := cloud.Instance{
		ID: instanceID, Type: "m5.large", Limits: cloud.Limits{ENIs: 3, IPv4PerENI: 10, IPv6: true, Trunk: true},
		SubnetID: subnetID, SecurityGroups: []string{sgID, "sg-0ddd"},
		ENIs: []cloud.ENI{
			with(base, func(e *cloud.ENI) {
				e.ID, e.MAC, e.DeviceNumber, e.PrimaryIP = "eni-0prim", primaryMAC, 0, a("10.0.1.10")
				e.IPv4, e.IPv6Prefixes = []netip.Addr{a("10.0.1.11")}, []netip.Prefix{p("2600:1f14:a:1::/80")}
			}),
			with(base, func(e *cloud.ENI) {
				e.ID, e.MAC, e.DeviceNumber, e.PrimaryIP = "eni-0second", "02:00:00:00:01:01", 1, a("10.0.1.20")
				e.IPv4, e.IPv4Prefixes = []netip.Addr{a("10.0.1.21"), a("10.0.1.22")}, []netip.Prefix{p("10.0.1.32/28")}
			}),
			with(base, func(e *cloud.ENI) {
				e.ID, e.MAC, e.DeviceNumber, e.PrimaryIP, e.Trunk = "eni-0trunk", "02:00:00:00:02:01", 2, a("10.0.1.30"), true
			}),
		},
	}
	if !reflect.DeepEqual(inst, want) {
		t.Fatalf("instance\n got %+v\nwant %+v", inst, want)
	}
}

// TestInstanceKeepsIMDSWhenEC2LacksTheENI: an ENI EC2 does not (yet) list
// keeps IMDS's addresses rather than vanishing.
func TestInstanceKeepsIMDSWhenEC2LacksTheENI(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectAttached(api)
	inst, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.ENIs) != 1 || inst.ENIs[0].PrimaryIP.String() != "10.0.1.10" || len(inst.ENIs[0].IPv4) != 1 ||
		inst.ENIs[0].IPv4Prefixes != nil || inst.ENIs[0].IPv6Prefixes != nil {
		t.Fatalf("ENIs %+v", inst.ENIs)
	}
}

// TestInstanceTypeNotInTable: DescribeInstanceTypes gives the limits, once
// (the identity is cached), and Trunk is false.
func TestInstanceTypeNotInTable(t *testing.T) {
	api, md := newMocks(t)
	keys := nodeIMDS(nil)
	keys["instance-type"] = "m7i.large"
	reads := map[string]int{}
	fakeIMDS(md, keys, reads)
	api.EXPECT().DescribeInstanceTypes(gomock.Any(), &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m7i.large"}}).
		Return(&ec2.DescribeInstanceTypesOutput{InstanceTypes: []types.InstanceTypeInfo{{
			InstanceType: "m7i.large",
			NetworkInfo: &types.NetworkInfo{MaximumNetworkInterfaces: aws.Int32(3), Ipv4AddressesPerInterface: aws.Int32(10),
				Ipv6Supported: aws.Bool(true)},
		}}}, nil).Times(1)
	expectAttached(api).Times(2)
	prov := cloud.NewProvider(api, md, cloud.ProviderOptions{})
	for range 2 {
		inst, err := prov.Instance(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if inst.Limits != (cloud.Limits{ENIs: 3, IPv4PerENI: 10, IPv6: true}) {
			t.Fatalf("limits %+v", inst.Limits)
		}
	}
	if reads["instance-type"] != 1 {
		t.Errorf("instance-type read %d times, want once", reads["instance-type"])
	}
}

func TestInstanceTypeLookupFails(t *testing.T) {
	for name, out := range map[string]*ec2.DescribeInstanceTypesOutput{
		"missing":  {},
		"no limit": {InstanceTypes: []types.InstanceTypeInfo{{InstanceType: "m7i.large", NetworkInfo: &types.NetworkInfo{}}}},
		"zero": {InstanceTypes: []types.InstanceTypeInfo{{InstanceType: "m7i.large", NetworkInfo: &types.NetworkInfo{
			MaximumNetworkInterfaces: aws.Int32(0), Ipv4AddressesPerInterface: aws.Int32(10)}}}},
	} {
		t.Run(name, func(t *testing.T) {
			api, md := newMocks(t)
			keys := nodeIMDS(nil)
			keys["instance-type"] = "m7i.large"
			fakeIMDS(md, keys, nil)
			api.EXPECT().DescribeInstanceTypes(gomock.Any(), gomock.Any()).Return(out, nil)
			_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
			if err == nil || !strings.Contains(err.Error(), "DescribeInstanceTypes m7i.large") {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// TestInstanceMetadataErrors: only a 404 of an optional key means
// "none"; any other failure fails Instance, naming the key.
func TestInstanceMetadataErrors(t *testing.T) {
	t.Run("ipv4-prefix 500", func(t *testing.T) {
		api, md := newMocks(t)
		keys := nodeIMDS(nil)
		md.EXPECT().GetMetadata(gomock.Any(), gomock.Any()).AnyTimes().DoAndReturn(fakeWithError(keys, macKey(primaryMAC, "ipv4-prefix"), metadataStatus(http.StatusInternalServerError)))
		_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
		if err == nil || !strings.Contains(err.Error(), "ipv4-prefix") {
			t.Fatalf("err %v", err)
		}
	})
	for _, key := range []string{"local-ipv4s", "device-number", "subnet-ipv4-cidr-block"} {
		t.Run(key+" absent", func(t *testing.T) {
			api, md := newMocks(t)
			keys := nodeIMDS(nil)
			delete(keys, macKey(primaryMAC, key))
			fakeIMDS(md, keys, nil)
			_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("err %v", err)
			}
		})
	}
	for key, bad := range map[string]string{"device-number": "x", "subnet-ipv4-cidr-block": "2600::/64", "local-ipv4s": "10.0.1.300"} {
		t.Run(key+" malformed", func(t *testing.T) {
			api, md := newMocks(t)
			keys := nodeIMDS(nil)
			keys[macKey(primaryMAC, key)] = bad
			fakeIMDS(md, keys, nil)
			_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("err %v", err)
			}
		})
	}
	t.Run("primary MAC not listed", func(t *testing.T) {
		api, md := newMocks(t)
		keys := nodeIMDS(nil)
		keys["mac"] = "02:00:00:00:09:09"
		fakeIMDS(md, keys, nil)
		_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
		if err == nil || !strings.Contains(err.Error(), "02:00:00:00:09:09") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("EC2 throttled", func(t *testing.T) {
		api, md := newMocks(t)
		fakeIMDS(md, nodeIMDS(nil), nil)
		api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeRequestLimitExceeded))
		_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
		if !cloud.IsThrottled(err) || !strings.Contains(err.Error(), "DescribeNetworkInterfaces attached to "+instanceID) {
			t.Fatalf("err %v", err)
		}
	})
}

// TestDescribeAttachedFollowsNextToken: a paged answer is read to the end.
func TestDescribeAttachedFollowsNextToken(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(map[string][3]string{"02:00:00:00:01:01": {"1", "eni-0second", "10.0.1.20"}}), nil)
	filter := []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{instanceID}}}
	gomock.InOrder(
		api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), &ec2.DescribeNetworkInterfacesInput{Filters: filter}).
			Return(&ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: []types.NetworkInterface{attachedENI("eni-0prim", 0, "10.0.1.10")}, NextToken: aws.String("page2")}, nil),
		api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), &ec2.DescribeNetworkInterfacesInput{Filters: filter, NextToken: aws.String("page2")}).
			Return(&ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: []types.NetworkInterface{attachedENI("eni-0second", 1, "10.0.1.20", "10.0.1.25")}}, nil),
	)
	inst, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.ENIs[1].IPv4; len(got) != 1 || got[0].String() != "10.0.1.25" {
		t.Fatalf("second page not applied: %v", got)
	}
	if len(inst.ENIs[0].IPv4) != 0 {
		t.Fatalf("first page not applied: %v", inst.ENIs[0].IPv4)
	}
}

// TestInstanceSkipsENIDetachedWhileReading: a listed MAC whose keys are
// gone by the time they are read was detached meanwhile; only the
// primary's keys are required.
func TestInstanceSkipsENIDetachedWhileReading(t *testing.T) {
	api, md := newMocks(t)
	keys := nodeIMDS(map[string][3]string{"02:00:00:00:01:01": {"1", "eni-0second", "10.0.1.20"}})
	delete(keys, macKey("02:00:00:00:01:01", "local-ipv4s"))
	fakeIMDS(md, keys, nil)
	expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10"))
	inst, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.ENIs) != 1 || inst.ENIs[0].ID != "eni-0prim" {
		t.Fatalf("ENIs %+v", inst.ENIs)
	}
}
