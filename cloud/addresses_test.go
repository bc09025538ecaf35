package cloud_test

import (
	"context"
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

func TestAssignIPv4(t *testing.T) {
	api, md := newMocks(t)
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String("eni-1"), SecondaryPrivateIpAddressCount: aws.Int32(2),
	}).Return(&ec2.AssignPrivateIpAddressesOutput{AssignedPrivateIpAddresses: []types.AssignedPrivateIpAddress{
		{PrivateIpAddress: aws.String("10.0.1.5")}, {PrivateIpAddress: aws.String("10.0.1.6")},
	}}, nil)
	ips, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).AssignIPv4(context.Background(), "eni-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.1.6")}; !reflect.DeepEqual(ips, want) {
		t.Fatalf("got %v, want %v", ips, want)
	}
}

func TestAssignIPv4Errors(t *testing.T) {
	api, md := newMocks(t)
	p := cloud.NewProvider(api, md, cloud.ProviderOptions{})
	for _, n := range []int{0, -1} {
		if _, err := p.AssignIPv4(context.Background(), "eni-1", n); err == nil || !strings.Contains(err.Error(), "eni-1") {
			t.Errorf("n=%d: err %v", n, err)
		}
	}
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeInsufficientFreeAddresses))
	if _, err := p.AssignIPv4(context.Background(), "eni-1", 3); !cloud.IsSubnetFull(err) || !strings.Contains(err.Error(), "AssignPrivateIpAddresses 3 on eni-1") {
		t.Errorf("err %v", err)
	}
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), gomock.Any()).Return(&ec2.AssignPrivateIpAddressesOutput{
		AssignedPrivateIpAddresses: []types.AssignedPrivateIpAddress{{PrivateIpAddress: aws.String("2600::1")}}}, nil)
	if _, err := p.AssignIPv4(context.Background(), "eni-1", 1); err == nil || !strings.Contains(err.Error(), "not IPv4") {
		t.Errorf("err %v", err)
	}
}

func TestUnassignIPv4(t *testing.T) {
	api, md := newMocks(t)
	p := cloud.NewProvider(api, md, cloud.ProviderOptions{})
	// Nothing to give back: no call (the mock fails on any).
	if err := p.UnassignIPv4(context.Background(), "eni-1", nil); err != nil {
		t.Fatal(err)
	}
	api.EXPECT().UnassignPrivateIpAddresses(gomock.Any(), &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String("eni-1"), PrivateIpAddresses: []string{"10.0.1.5", "10.0.1.6"},
	}).Return(&ec2.UnassignPrivateIpAddressesOutput{}, nil)
	if err := p.UnassignIPv4(context.Background(), "eni-1", []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.1.6")}); err != nil {
		t.Fatal(err)
	}
	api.EXPECT().UnassignPrivateIpAddresses(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeENINotFound))
	if err := p.UnassignIPv4(context.Background(), "eni-1", []netip.Addr{netip.MustParseAddr("10.0.1.5")}); !cloud.IsNotFound(err) || !strings.Contains(err.Error(), "eni-1") {
		t.Fatalf("err %v", err)
	}
}

func TestAssignIPv4Prefixes(t *testing.T) {
	api, md := newMocks(t)
	p := cloud.NewProvider(api, md, cloud.ProviderOptions{})
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String("eni-1"), Ipv4PrefixCount: aws.Int32(1),
	}).Return(&ec2.AssignPrivateIpAddressesOutput{AssignedIpv4Prefixes: []types.Ipv4PrefixSpecification{{Ipv4Prefix: aws.String("10.0.1.16/28")}}}, nil)
	pfx, err := p.AssignIPv4Prefixes(context.Background(), "eni-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(pfx) != 1 || pfx[0] != netip.MustParsePrefix("10.0.1.16/28") {
		t.Fatalf("got %v", pfx)
	}
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), gomock.Any()).Return(&ec2.AssignPrivateIpAddressesOutput{
		AssignedIpv4Prefixes: []types.Ipv4PrefixSpecification{{Ipv4Prefix: aws.String("10.0.1.16/27")}}}, nil)
	if _, err := p.AssignIPv4Prefixes(context.Background(), "eni-1", 1); err == nil || !strings.Contains(err.Error(), "/28") {
		t.Fatalf("err %v", err)
	}
	api.EXPECT().AssignPrivateIpAddresses(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeInsufficientCidrBlocks))
	if _, err := p.AssignIPv4Prefixes(context.Background(), "eni-1", 2); !cloud.IsSubnetFull(err) || !strings.Contains(err.Error(), "2 /28 prefixes on eni-1") {
		t.Fatalf("err %v", err)
	}
	if _, err := p.AssignIPv4Prefixes(context.Background(), "eni-1", 0); err == nil {
		t.Fatal("0 prefixes accepted")
	}
}

func TestUnassignIPv4Prefixes(t *testing.T) {
	api, md := newMocks(t)
	p := cloud.NewProvider(api, md, cloud.ProviderOptions{})
	if err := p.UnassignIPv4Prefixes(context.Background(), "eni-1", nil); err != nil {
		t.Fatal(err)
	}
	api.EXPECT().UnassignPrivateIpAddresses(gomock.Any(), &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String("eni-1"), Ipv4Prefixes: []string{"10.0.1.16/28"},
	}).Return(&ec2.UnassignPrivateIpAddressesOutput{}, nil)
	if err := p.UnassignIPv4Prefixes(context.Background(), "eni-1", []netip.Prefix{netip.MustParsePrefix("10.0.1.16/28")}); err != nil {
		t.Fatal(err)
	}
}
