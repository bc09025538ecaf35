package cloud_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/cloud"
)

// TestInstrument: every EC2 method reports its own name, the call's error
// and a duration, and passes input, output and error through unchanged.
func TestInstrument(t *testing.T) {
	api, _ := newMocks(t)
	type report struct {
		api string
		err error
		d   time.Duration
	}
	var got []report
	inst := cloud.Instrument(api, func(a string, err error, d time.Duration) { got = append(got, report{a, err, d}) })
	ctx := context.Background()
	throttled := apiErr(cloud.CodeRequestLimitExceeded)

	in := &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String("eni-1")}
	out := &ec2.AssignPrivateIpAddressesOutput{NetworkInterfaceId: aws.String("eni-1")}
	api.EXPECT().AssignPrivateIpAddresses(ctx, in).DoAndReturn(func(context.Context, *ec2.AssignPrivateIpAddressesInput, ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) {
		time.Sleep(5 * time.Millisecond)
		return out, nil
	})
	if o, err := inst.AssignPrivateIpAddresses(ctx, in); o != out || err != nil {
		t.Fatalf("AssignPrivateIpAddresses = %v, %v", o, err)
	}
	if len(got) != 1 || got[0].api != "AssignPrivateIpAddresses" || got[0].err != nil || got[0].d < 5*time.Millisecond {
		t.Fatalf("report %+v", got)
	}

	// Every other method, failing, reports its name and the error.
	got = nil
	api.EXPECT().CreateNetworkInterface(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().AttachNetworkInterface(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().ModifyNetworkInterfaceAttribute(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DetachNetworkInterface(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DeleteNetworkInterface(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DescribeNetworkInterfaces(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().UnassignPrivateIpAddresses(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().AssignIpv6Addresses(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().UnassignIpv6Addresses(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DescribeInstances(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DescribeInstanceTypes(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().DescribeSubnets(ctx, gomock.Any()).Return(nil, throttled)
	api.EXPECT().CreateTags(ctx, gomock.Any()).Return(nil, throttled)
	errs := []error{}
	keep := func(_ any, err error) { errs = append(errs, err) }
	keep(inst.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{}))
	keep(inst.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{}))
	keep(inst.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{}))
	keep(inst.DetachNetworkInterface(ctx, &ec2.DetachNetworkInterfaceInput{}))
	keep(inst.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{}))
	keep(inst.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{}))
	keep(inst.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{}))
	keep(inst.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{}))
	keep(inst.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{}))
	keep(inst.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}))
	keep(inst.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{}))
	keep(inst.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{}))
	keep(inst.CreateTags(ctx, &ec2.CreateTagsInput{}))
	wantAPIs := []string{"CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute",
		"DetachNetworkInterface", "DeleteNetworkInterface", "DescribeNetworkInterfaces", "UnassignPrivateIpAddresses",
		"AssignIpv6Addresses", "UnassignIpv6Addresses", "DescribeInstances", "DescribeInstanceTypes", "DescribeSubnets", "CreateTags"}
	var apis []string
	for i, r := range got {
		apis = append(apis, r.api)
		if r.err != throttled || errs[i] != throttled {
			t.Errorf("%s: reported %v, returned %v", r.api, r.err, errs[i])
		}
	}
	if !reflect.DeepEqual(apis, wantAPIs) {
		t.Fatalf("reported\n%v\nwant\n%v", apis, wantAPIs)
	}
}
