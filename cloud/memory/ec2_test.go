package memory

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

var bg = context.Background()

// TestIPv4PerENILimit: the primary address counts, and prefixes share the
// same budget.
func TestIPv4PerENILimit(t *testing.T) {
	c := mustCloud(t, "t3.medium", Options{Bare: true}) // 6 per ENI
	eni := mustInstance(t, c).ENIs[0].ID
	p := c.Provider()
	if _, err := p.AssignIPv4(bg, eni, 6); cloud.ErrorCode(err) != cloud.CodeIPAddressLimitExceeded {
		t.Fatalf("6 secondaries + primary on t3.medium: %v", err)
	}
	if _, err := p.AssignIPv4(bg, eni, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AssignIPv4Prefixes(bg, eni, 2); err != nil { // 1 + 3 + 2 = 6
		t.Fatal(err)
	}
	_, err := p.AssignIPv4(bg, eni, 1)
	wantCode(t, err, cloud.CodeIPAddressLimitExceeded)
	_, err = p.AssignIPv4Prefixes(bg, eni, 1)
	wantCode(t, err, cloud.CodeIPAddressLimitExceeded)
	// The failed calls took nothing from the subnet: 256-5-1-3-32.
	if got := available(t, c, mustInstance(t, c).SubnetID); got != 215 {
		t.Errorf("available = %d, want 215", got)
	}
}

// TestAttachmentLimit: a t3.medium takes 3 ENIs; the 4th attach fails.
func TestAttachmentLimit(t *testing.T) {
	c := mustCloud(t, "t3.medium", Options{Bare: true})
	sub := mustInstance(t, c).SubnetID
	for d := 1; d < 3; d++ {
		id := createENI(t, c, sub)
		if _, err := c.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{InstanceId: aws.String(c.InstanceID()), NetworkInterfaceId: aws.String(id), DeviceIndex: aws.Int32(int32(d))}); err != nil {
			t.Fatal(err)
		}
	}
	id := createENI(t, c, sub)
	_, err := c.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{InstanceId: aws.String(c.InstanceID()), NetworkInterfaceId: aws.String(id), DeviceIndex: aws.Int32(1)})
	wantCode(t, err, cloud.CodeAttachmentLimitExceeded)
	_, err = c.Provider().AllocENI(bg)
	if err == nil {
		t.Fatal("AllocENI beyond the ENI limit succeeded")
	}
}

func TestAttachErrors(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	sub := mustInstance(t, c).SubnetID
	id := createENI(t, c, sub)
	attach := func(inst, eni string, dev int32) error {
		_, err := c.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{InstanceId: aws.String(inst), NetworkInterfaceId: aws.String(eni), DeviceIndex: aws.Int32(dev)})
		return err
	}
	wantCode(t, attach(c.InstanceID(), "eni-0nope", 1), cloud.CodeENINotFound)
	wantCode(t, attach("i-0other", id, 1), codeInstanceNotFound)
	wantCode(t, attach(c.InstanceID(), id, 0), codeInvalidParameter) // the primary's slot
	wantCode(t, attach(c.InstanceID(), id, 3), codeInvalidParameter) // beyond m5.large's 3
	if err := attach(c.InstanceID(), id, 2); err != nil {
		t.Fatal(err)
	}
	wantCode(t, attach(c.InstanceID(), id, 1), cloud.CodeENIInUse)
}

// TestSubnetExhaustion: a /28 has 11 usable addresses; the bare primary
// takes one; the rest go lowest first, then the subnet is full for
// addresses, ENIs and prefixes alike.
func TestSubnetExhaustion(t *testing.T) {
	c := mustCloud(t, "c5.18xlarge", Options{Bare: true, SubnetBits: 28})
	inst := mustInstance(t, c)
	p := c.Provider()
	eni := inst.ENIs[0].ID
	ips, err := p.AssignIPv4(bg, eni, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ips[0].String() != "10.0.1.5" || ips[9].String() != "10.0.1.14" {
		t.Errorf("assigned %v, want 10.0.1.5 to 10.0.1.14", ips)
	}
	if got := available(t, c, inst.SubnetID); got != 0 {
		t.Fatalf("available = %d, want 0", got)
	}
	_, err = p.AssignIPv4(bg, eni, 1)
	if !cloud.IsSubnetFull(err) || cloud.ErrorCode(err) != cloud.CodeInsufficientFreeAddresses {
		t.Fatalf("assign in a full subnet: %v", err)
	}
	_, err = p.AllocENI(bg)
	if !cloud.IsSubnetFull(err) {
		t.Fatalf("AllocENI in a full subnet: %v", err)
	}
	_, err = p.AssignIPv4Prefixes(bg, eni, 1)
	wantCode(t, err, cloud.CodeInsufficientCidrBlocks)
	// Giving one back makes exactly that one free again.
	if err := p.UnassignIPv4(bg, eni, ips[3:4]); err != nil {
		t.Fatal(err)
	}
	again, err := p.AssignIPv4(bg, eni, 1)
	if err != nil || again[0] != ips[3] {
		t.Fatalf("reassigned %v %v, want %s", again, err, ips[3])
	}
}

// TestPrefixesAccounting: /28s are aligned, skip the reserved first and
// last blocks and blocks with any address in use, and come back on
// unassign.
func TestPrefixesAccounting(t *testing.T) {
	c := mustCloud(t, "c5.18xlarge", Options{Bare: true, SubnetBits: 26}) // 64 addresses, 4 blocks
	inst := mustInstance(t, c)
	p := c.Provider()
	eni := inst.ENIs[0].ID
	// Block 0 has the reserved addresses and the primary (.4); block 3 has
	// the broadcast. Blocks 1 and 2 are free.
	pfx, err := p.AssignIPv4Prefixes(bg, eni, 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pfx) != "[10.0.1.16/28 10.0.1.32/28]" {
		t.Fatalf("prefixes %v", pfx)
	}
	if got := available(t, c, inst.SubnetID); got != 64-5-1-32 {
		t.Errorf("available = %d, want %d", got, 64-5-1-32)
	}
	_, err = p.AssignIPv4Prefixes(bg, eni, 1)
	wantCode(t, err, cloud.CodeInsufficientCidrBlocks)
	if err := p.UnassignIPv4Prefixes(bg, eni, pfx[:1]); err != nil {
		t.Fatal(err)
	}
	// A single address taken from block 1 makes it unusable as a prefix.
	ips, err := p.AssignIPv4(bg, eni, 12) // .5-.15, then .16
	if err != nil {
		t.Fatal(err)
	}
	if ips[11].String() != "10.0.1.16" {
		t.Fatalf("12th address %s, want 10.0.1.16", ips[11])
	}
	_, err = p.AssignIPv4Prefixes(bg, eni, 1)
	wantCode(t, err, cloud.CodeInsufficientCidrBlocks)
	got := mustInstance(t, c).ENIs[0]
	if len(got.IPv4) != 12 || fmt.Sprint(got.IPv4Prefixes) != "[10.0.1.32/28]" {
		t.Errorf("ENI %+v", got)
	}
}

func TestUnassignNotOwned(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{})
	inst := mustInstance(t, c)
	p := c.Provider()
	for name, err := range map[string]error{
		"another ENI's":  p.UnassignIPv4(bg, inst.ENIs[0].ID, inst.ENIs[1].IPv4[:1]),
		"the primary":    p.UnassignIPv4(bg, inst.ENIs[0].ID, []netip.Addr{inst.ENIs[0].PrimaryIP}),
		"a prefix":       p.UnassignIPv4Prefixes(bg, inst.ENIs[0].ID, []netip.Prefix{netip.MustParsePrefix("10.0.1.16/28")}),
		"an unknown ENI": p.UnassignIPv4(bg, "eni-0nope", inst.ENIs[0].IPv4[:1]),
	} {
		want := codeInvalidParameter
		if name == "an unknown ENI" {
			want = cloud.CodeENINotFound
		}
		if cloud.ErrorCode(err) != want {
			t.Errorf("%s: %v, want %s", name, err, want)
		}
	}
	// Nothing changed.
	if again := mustInstance(t, c); fmt.Sprint(again) != fmt.Sprint(inst) {
		t.Errorf("a failed unassign changed the instance")
	}
}

// TestENILifecycle: create → attach → DeleteOnTermination → detach →
// delete through EC2 directly, with the errors on the way.
func TestENILifecycle(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	inst := mustInstance(t, c)
	before := available(t, c, inst.SubnetID)
	id := createENI(t, c, inst.SubnetID)
	if got := available(t, c, inst.SubnetID); got != before-1 {
		t.Errorf("create took %d addresses, want 1", before-got)
	}
	att, err := c.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{InstanceId: aws.String(c.InstanceID()), NetworkInterfaceId: aws.String(id), DeviceIndex: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ModifyNetworkInterfaceAttribute(bg, &ec2.ModifyNetworkInterfaceAttributeInput{NetworkInterfaceId: aws.String(id),
		Attachment: &types.NetworkInterfaceAttachmentChanges{AttachmentId: aws.String("eni-attach-0wrong"), DeleteOnTermination: aws.Bool(true)}})
	wantCode(t, err, codeAttachmentNotFound)
	if _, err := c.ModifyNetworkInterfaceAttribute(bg, &ec2.ModifyNetworkInterfaceAttributeInput{NetworkInterfaceId: aws.String(id),
		Attachment: &types.NetworkInterfaceAttachmentChanges{AttachmentId: att.AttachmentId, DeleteOnTermination: aws.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if a := d.NetworkInterfaces[0].Attachment; a == nil || !aws.ToBool(a.DeleteOnTermination) || aws.ToInt32(a.DeviceIndex) != 1 || d.NetworkInterfaces[0].Status != types.NetworkInterfaceStatusInUse {
		t.Fatalf("described %+v", d.NetworkInterfaces[0])
	}
	_, err = c.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
	wantCode(t, err, cloud.CodeENIInUse)
	primAtt, _ := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{inst.ENIs[0].ID}})
	_, err = c.DetachNetworkInterface(bg, &ec2.DetachNetworkInterfaceInput{AttachmentId: primAtt.NetworkInterfaces[0].Attachment.AttachmentId})
	wantCode(t, err, codeOperationNotPermitted)
	if _, err := c.DetachNetworkInterface(bg, &ec2.DetachNetworkInterfaceInput{AttachmentId: att.AttachmentId}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DetachNetworkInterface(bg, &ec2.DetachNetworkInterfaceInput{AttachmentId: att.AttachmentId})
	wantCode(t, err, codeAttachmentNotFound)
	if _, err := c.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	if got := available(t, c, inst.SubnetID); got != before {
		t.Errorf("delete gave back %d addresses of 1", got-(before-1))
	}
	_, err = c.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
	wantCode(t, err, cloud.CodeENINotFound)
	_, err = c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{id}})
	wantCode(t, err, cloud.CodeENINotFound)
}

func TestCreateErrors(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	sub := mustInstance(t, c).SubnetID
	for name, in := range map[string]*ec2.CreateNetworkInterfaceInput{
		codeSubnetNotFound:   {SubnetId: aws.String("subnet-0nope")},
		codeMissingParameter: {},
		codeGroupNotFound:    {SubnetId: aws.String(sub), Groups: []string{"sg-0other"}},
		codeUnsupported:      {SubnetId: aws.String(sub), SecondaryPrivateIpAddressCount: aws.Int32(2)},
	} {
		_, err := c.CreateNetworkInterface(bg, in)
		wantCode(t, err, name)
	}
}

func TestDescribeFilters(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Trunk: true})
	describe := func(filters ...types.Filter) []string {
		t.Helper()
		out, err := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{Filters: filters})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ni := range out.NetworkInterfaces {
			ids = append(ids, fmt.Sprint(aws.ToInt32(ni.Attachment.DeviceIndex)))
		}
		return ids
	}
	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	if got := fmt.Sprint(describe(f("interface-type", "trunk"))); got != "[2]" {
		t.Errorf("trunk filter: devices %s", got)
	}
	if got := describe(f("attachment.instance-id", c.InstanceID())); len(got) != 3 {
		t.Errorf("instance filter: devices %v", got)
	}
	if got := describe(f("attachment.instance-id", "i-0other")); len(got) != 0 {
		t.Errorf("other instance: devices %v", got)
	}
	if got := fmt.Sprint(describe(f("tag:"+cloud.TagManaged, "true"))); got != "[1]" {
		t.Errorf("managed tag: devices %s", got)
	}
	if got := describe(f("tag-key", cloud.TagInstanceID), f("attachment.device-index", "0", "1")); fmt.Sprint(got) != "[1]" {
		t.Errorf("tag-key and device: devices %v", got)
	}
	_, err := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{f("banana", "x")}})
	wantCode(t, err, codeInvalidParameter)
}

func TestDescribeInstancesTypesSubnets(t *testing.T) {
	c := mustCloud(t, "m5.4xlarge", Options{})
	di, err := c.DescribeInstances(bg, &ec2.DescribeInstancesInput{InstanceIds: []string{c.InstanceID()}})
	if err != nil {
		t.Fatal(err)
	}
	in := di.Reservations[0].Instances[0]
	if in.InstanceType != "m5.4xlarge" || len(in.NetworkInterfaces) != 8 || aws.ToString(in.PrivateIpAddress) != "10.0.1.10" ||
		aws.ToInt32(in.NetworkInterfaces[7].Attachment.DeviceIndex) != 7 || len(in.NetworkInterfaces[0].PrivateIpAddresses) != 30 {
		t.Errorf("instance %+v", in)
	}
	_, err = c.DescribeInstances(bg, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0nope"}})
	wantCode(t, err, codeInstanceNotFound)

	dt, err := c.DescribeInstanceTypes(bg, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"t3.medium"}})
	if err != nil {
		t.Fatal(err)
	}
	if ni := dt.InstanceTypes[0].NetworkInfo; aws.ToInt32(ni.MaximumNetworkInterfaces) != 3 || aws.ToInt32(ni.Ipv4AddressesPerInterface) != 6 {
		t.Errorf("t3.medium %+v", ni)
	}
	all, _ := c.DescribeInstanceTypes(bg, &ec2.DescribeInstanceTypesInput{})
	if len(all.InstanceTypes) != len(Known()) {
		t.Errorf("%d types, want %d", len(all.InstanceTypes), len(Known()))
	}
	_, err = c.DescribeInstanceTypes(bg, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x1.banana"}})
	wantCode(t, err, codeInvalidParameter)

	ds, err := c.DescribeSubnets(bg, &ec2.DescribeSubnetsInput{Filters: []types.Filter{{Name: aws.String("cidr-block"), Values: []string{"10.0.3.0/24"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Prefilled: the primary .10 and 29 pod addresses are taken.
	if len(ds.Subnets) != 1 || aws.ToInt32(ds.Subnets[0].AvailableIpAddressCount) != 256-5-30 {
		t.Errorf("subnets %+v", ds.Subnets)
	}
}

func TestCreateTags(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{})
	eni := mustInstance(t, c).ENIs[0].ID
	if _, err := c.CreateTags(bg, &ec2.CreateTagsInput{Resources: []string{eni}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}); err != nil {
		t.Fatal(err)
	}
	out, _ := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{{Name: aws.String("tag:k"), Values: []string{"v"}}}})
	if len(out.NetworkInterfaces) != 1 || aws.ToString(out.NetworkInterfaces[0].NetworkInterfaceId) != eni {
		t.Fatalf("tagged %+v", out.NetworkInterfaces)
	}
	_, err := c.CreateTags(bg, &ec2.CreateTagsInput{Resources: []string{eni, "eni-0nope"}, Tags: []types.Tag{{Key: aws.String("x"), Value: aws.String("y")}}})
	wantCode(t, err, cloud.CodeENINotFound)
	out, _ = c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{{Name: aws.String("tag-key"), Values: []string{"x"}}}})
	if len(out.NetworkInterfaces) != 0 {
		t.Fatal("a failed CreateTags tagged some resources")
	}
}

func TestIPv6Prefixes(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	eni := mustInstance(t, c).ENIs[0].ID
	out, err := c.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6PrefixCount: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out.AssignedIpv6Prefixes) != "[2600:1f14:a:1::/80 2600:1f14:a:1:1::/80]" {
		t.Fatalf("prefixes %v (the first must be PrimaryIPv6Prefix %s)", out.AssignedIpv6Prefixes, PrimaryIPv6Prefix)
	}
	if got := mustInstance(t, c).ENIs[0].IPv6Prefixes; len(got) != 2 || got[0] != PrimaryIPv6Prefix {
		t.Errorf("instance IPv6 prefixes %v", got)
	}
	_, err = c.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6Prefixes: []string{"2600:1f14:a:1::/80"}})
	wantCode(t, err, codeInvalidParameter)
	if _, err := c.UnassignIpv6Addresses(bg, &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6Prefixes: []string{"2600:1f14:a:1::/80"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6Prefixes: []string{"2600:1f14:a:1::/80"}}); err != nil {
		t.Fatalf("a given-back prefix cannot be taken again: %v", err)
	}
	_, err = c.UnassignIpv6Addresses(bg, &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6Prefixes: []string{"2600:1f14:a:9::/80"}})
	wantCode(t, err, codeInvalidParameter)
	_, err = c.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(eni), Ipv6AddressCount: aws.Int32(1)})
	wantCode(t, err, codeUnsupported)
}
