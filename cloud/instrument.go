package cloud

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Instrument wraps an EC2 so that every call reports its API name, its
// error (nil on success) and how long it took, for ipamd's metrics. The
// report comes after the call returns, on the caller's goroutine.
func Instrument(e EC2, observe func(api string, err error, d time.Duration)) EC2 {
	return &instrumented{next: e, observe: observe}
}

type instrumented struct {
	next    EC2
	observe func(api string, err error, d time.Duration)
}

// timed runs one call and reports it. A free function because Go methods
// cannot have type parameters.
func timed[In, Out any](i *instrumented, api string, call func(context.Context, In, ...func(*ec2.Options)) (Out, error),
	ctx context.Context, in In, opts []func(*ec2.Options)) (Out, error) {
	start := time.Now()
	out, err := call(ctx, in, opts...)
	i.observe(api, err, time.Since(start))
	return out, err
}

func (i *instrumented) CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error) {
	return timed(i, "CreateNetworkInterface", i.next.CreateNetworkInterface, ctx, in, opts)
}

func (i *instrumented) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	return timed(i, "AttachNetworkInterface", i.next.AttachNetworkInterface, ctx, in, opts)
}

func (i *instrumented) ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, opts ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
	return timed(i, "ModifyNetworkInterfaceAttribute", i.next.ModifyNetworkInterfaceAttribute, ctx, in, opts)
}

func (i *instrumented) DetachNetworkInterface(ctx context.Context, in *ec2.DetachNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.DetachNetworkInterfaceOutput, error) {
	return timed(i, "DetachNetworkInterface", i.next.DetachNetworkInterface, ctx, in, opts)
}

func (i *instrumented) DeleteNetworkInterface(ctx context.Context, in *ec2.DeleteNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error) {
	return timed(i, "DeleteNetworkInterface", i.next.DeleteNetworkInterface, ctx, in, opts)
}

func (i *instrumented) DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, opts ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error) {
	return timed(i, "DescribeNetworkInterfaces", i.next.DescribeNetworkInterfaces, ctx, in, opts)
}

func (i *instrumented) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, opts ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) {
	return timed(i, "AssignPrivateIpAddresses", i.next.AssignPrivateIpAddresses, ctx, in, opts)
}

func (i *instrumented) UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, opts ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error) {
	return timed(i, "UnassignPrivateIpAddresses", i.next.UnassignPrivateIpAddresses, ctx, in, opts)
}

func (i *instrumented) AssignIpv6Addresses(ctx context.Context, in *ec2.AssignIpv6AddressesInput, opts ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error) {
	return timed(i, "AssignIpv6Addresses", i.next.AssignIpv6Addresses, ctx, in, opts)
}

func (i *instrumented) UnassignIpv6Addresses(ctx context.Context, in *ec2.UnassignIpv6AddressesInput, opts ...func(*ec2.Options)) (*ec2.UnassignIpv6AddressesOutput, error) {
	return timed(i, "UnassignIpv6Addresses", i.next.UnassignIpv6Addresses, ctx, in, opts)
}

func (i *instrumented) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	return timed(i, "DescribeInstances", i.next.DescribeInstances, ctx, in, opts)
}

func (i *instrumented) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	return timed(i, "DescribeInstanceTypes", i.next.DescribeInstanceTypes, ctx, in, opts)
}

func (i *instrumented) DescribeSubnets(ctx context.Context, in *ec2.DescribeSubnetsInput, opts ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error) {
	return timed(i, "DescribeSubnets", i.next.DescribeSubnets, ctx, in, opts)
}

func (i *instrumented) CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error) {
	return timed(i, "CreateTags", i.next.CreateTags, ctx, in, opts)
}
