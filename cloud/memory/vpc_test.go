package memory

import (
	"errors"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

func mustVPC(t *testing.T, opt VPCOptions) *VPC {
	t.Helper()
	v, err := NewVPC(opt)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustLaunch(t *testing.T, v *VPC, typ string, opt Options) *Cloud {
	t.Helper()
	c, err := v.Launch(typ, opt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustAllocENI(t *testing.T, c *Cloud) cloud.ENI {
	t.Helper()
	e, err := c.Provider().AllocENI(bg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustAssign(t *testing.T, c *Cloud, eniID string, n int) []netip.Addr {
	t.Helper()
	ips, err := c.Provider().AssignIPv4(bg, eniID, n)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// metadataLines reads an IMDS key.
func metadataLines(c *Cloud, path string) (string, error) {
	out, err := c.GetMetadata(bg, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(out.Content)
	return string(b), err
}

func TestVPCLaunchSharesTheSubnet(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a := mustLaunch(t, v, "m5.large", Options{})
	b := mustLaunch(t, v, "m5.large", Options{Trunk: true})
	ia, ib := mustInstance(t, a), mustInstance(t, b)
	if ia.ID != "i-"+hexID("instance/1") || ib.ID != "i-"+hexID("instance/2") || a.InstanceID() != ia.ID {
		t.Errorf("instance IDs %s %s", ia.ID, ib.ID)
	}
	if ia.SubnetID != ib.SubnetID || ia.ENIs[0].Subnet.String() != "10.0.0.0/16" || ia.ENIs[0].Gateway.String() != "10.0.0.1" {
		t.Fatalf("subnets %+v %+v", ia.ENIs[0], ib.ENIs[0])
	}
	// Lowest free first: .4 (after the reserved .0-.3), then b's primary and trunk.
	got := []netip.Addr{ia.ENIs[0].PrimaryIP, ib.ENIs[0].PrimaryIP, ib.ENIs[1].PrimaryIP}
	if !slices.Equal(got, addrs("10.0.0.4", "10.0.0.5", "10.0.0.6")) || !ib.ENIs[1].Trunk {
		t.Errorf("primaries %v, trunk %+v", got, ib.ENIs[1])
	}
	if ia.ENIs[0].MAC != "02:00:01:00:00:01" || ib.ENIs[0].MAC != "02:00:02:00:00:01" || ib.ENIs[1].MAC != "02:00:02:00:01:01" {
		t.Errorf("MACs %s %s %s", ia.ENIs[0].MAC, ib.ENIs[0].MAC, ib.ENIs[1].MAC)
	}
	if ia.ENIs[0].ID == ib.ENIs[0].ID || len(ia.VPCCIDRs) != 1 || ia.VPCCIDRs[0] != VPCCIDR {
		t.Errorf("ENI IDs %s %s, VPC CIDRs %v", ia.ENIs[0].ID, ib.ENIs[0].ID, ia.VPCCIDRs)
	}
	ea, eb := mustAllocENI(t, a), mustAllocENI(t, b)
	if ea.DeviceNumber != 1 || eb.DeviceNumber != 2 || ea.PrimaryIP.String() != "10.0.0.7" || eb.PrimaryIP.String() != "10.0.0.8" {
		t.Errorf("allocated %+v %+v", ea, eb)
	}
	if ea.MAC == eb.MAC || ea.ID == eb.ID || strings.HasPrefix(ea.MAC, "02:00:01:00") {
		t.Errorf("created ENIs share or clash: %s %s / %s %s", ea.ID, ea.MAC, eb.ID, eb.MAC)
	}
	ipa, ipb := mustAssign(t, a, ea.ID, 2), mustAssign(t, b, eb.ID, 2)
	if !slices.Equal(ipa, addrs("10.0.0.9", "10.0.0.10")) || !slices.Equal(ipb, addrs("10.0.0.11", "10.0.0.12")) {
		t.Errorf("assigned %v %v", ipa, ipb)
	}
	if got := v.Instances(); !slices.Equal(got, slices.Sorted(slices.Values([]string{ia.ID, ib.ID}))) {
		t.Errorf("Instances %v", got)
	}
}

// TestVPCAddressMovesToTheNextNode: what A gives back is the lowest free
// address, so B gets it next.
func TestVPCAddressMovesToTheNextNode(t *testing.T) {
	v := mustVPC(t, VPCOptions{SubnetBits: 24})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	ea, eb := mustAllocENI(t, a), mustAllocENI(t, b)
	ips := mustAssign(t, a, ea.ID, 4)
	if err := a.Provider().UnassignIPv4(bg, ea.ID, ips[1:2]); err != nil {
		t.Fatal(err)
	}
	if got := mustAssign(t, b, eb.ID, 2); got[0] != ips[1] || got[1] != ips[3].Next() {
		t.Errorf("B got %v, want %s then %s", got, ips[1], ips[3].Next())
	}
	if id, eni, ok := v.Holder(ips[1]); !ok || id != b.InstanceID() || eni != eb.ID {
		t.Errorf("Holder(%s) = %s %s %v", ips[1], id, eni, ok)
	}
}

func TestVPCTerminate(t *testing.T) {
	v := mustVPC(t, VPCOptions{SubnetBits: 24})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	subnetID := mustInstance(t, a).SubnetID
	dot := mustAllocENI(t, a) // AllocENI sets DeleteOnTermination
	mustAssign(t, a, dot.ID, 3)
	pfx, err := a.Provider().AssignIPv4Prefixes(bg, dot.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	// An ENI attached without DeleteOnTermination, as a half-done
	// AllocENI leaves it.
	kept := createENI(t, a, subnetID)
	if _, err := a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(kept), InstanceId: aws.String(a.InstanceID()), DeviceIndex: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	keptIPs := mustAssign(t, a, kept, 2)
	if _, err := a.CreateTags(bg, &ec2.CreateTagsInput{Resources: []string{kept},
		Tags: []types.Tag{{Key: aws.String(cloud.TagInstanceID), Value: aws.String(a.InstanceID())}}}); err != nil {
		t.Fatal(err)
	}
	before := available(t, b, subnetID)
	if len(v.AvailableENIs()) != 0 {
		t.Fatalf("available ENIs before terminating: %+v", v.AvailableENIs())
	}

	if err := v.Terminate(a.InstanceID()); err != nil {
		t.Fatal(err)
	}
	// Freed: the primary ENI's address, the DOT ENI's primary, 3
	// secondaries and 16 prefix addresses.
	if got := available(t, b, subnetID); got != before+1+1+3+16 {
		t.Errorf("available %d after terminating, want %d", got, before+21)
	}
	st := v.AvailableENIs()
	if len(st) != 1 || st[0].ID != kept || !slices.Equal(st[0].IPv4, keptIPs) || st[0].Tags[cloud.TagInstanceID] != a.InstanceID() ||
		st[0].SubnetID != subnetID || !st[0].PrimaryIP.IsValid() {
		t.Fatalf("AvailableENIs %+v", st)
	}
	if id, eni, ok := v.Holder(keptIPs[0]); !ok || id != "" || eni != kept {
		t.Errorf("Holder of a stranded address = %q %q %v", id, eni, ok)
	}
	if _, _, ok := v.Holder(pfx[0].Addr().Next()); ok {
		t.Errorf("the deleted ENI's prefix is still held")
	}
	if got := v.Instances(); !slices.Equal(got, []string{b.InstanceID()}) {
		t.Errorf("Instances %v", got)
	}

	// The gone node's calls fail cleanly.
	_, err = a.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{})
	wantCode(t, err, "InvalidInstanceID.NotFound")
	if _, err := a.Provider().AllocENI(bg); err == nil {
		t.Error("AllocENI on a terminated instance succeeded")
	}
	_, err = metadataLines(a, "instance-id")
	var status interface{ HTTPStatusCode() int }
	if err == nil || errors.As(err, &status) {
		t.Errorf("IMDS of a terminated instance: %v (want unreachable, not an HTTP answer)", err)
	}
	if _, err := a.GetRegion(bg, &imds.GetRegionInput{}); err == nil {
		t.Error("GetRegion of a terminated instance succeeded")
	}
	if _, err := a.Instance(bg); err == nil {
		t.Error("Instance of a terminated instance succeeded")
	}
	// Another node can attach to nothing of it, and may clean up after it.
	_, err = b.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(kept), InstanceId: aws.String(a.InstanceID()), DeviceIndex: aws.Int32(1)})
	wantCode(t, err, "InvalidInstanceID.NotFound")
	if _, err := b.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(kept)}); err != nil {
		t.Fatal(err)
	}
	if len(v.AvailableENIs()) != 0 || available(t, b, subnetID) != before+1+1+3+16+3 {
		t.Errorf("deleting the stranded ENI left %+v, available %d", v.AvailableENIs(), available(t, b, subnetID))
	}

	wantCode(t, v.Terminate(a.InstanceID()), "InvalidInstanceID.NotFound")
	wantCode(t, v.Terminate("i-nope"), "InvalidInstanceID.NotFound")
}

// TestVPCInstancesSeeOnlyTheirOwn: IMDS, the Provider's describes and
// DescribeInstances of A never show B's ENIs; device numbers and limits
// are per instance.
func TestVPCInstancesSeeOnlyTheirOwn(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a, b := mustLaunch(t, v, "t3.medium", Options{}), mustLaunch(t, v, "t3.medium", Options{})
	var bENIs []string
	for range 2 {
		mustAllocENI(t, a)
		bENIs = append(bENIs, mustAllocENI(t, b).ID)
	}
	// t3.medium has 3 slots: both are full, independently.
	if _, err := a.Provider().AllocENI(bg); !errors.Is(err, cloud.ErrNoFreeDevice) {
		t.Errorf("a 4th ENI on A: %v", err)
	}
	ia := mustInstance(t, a)
	if len(ia.ENIs) != 3 {
		t.Fatalf("A has %d ENIs", len(ia.ENIs))
	}
	for d, e := range ia.ENIs {
		if e.DeviceNumber != d || slices.Contains(bENIs, e.ID) {
			t.Errorf("A's ENI %d: %+v", d, e)
		}
	}
	macs, err := metadataLines(a, "network/interfaces/macs")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(macs, "/"); n != 3 || !strings.Contains(macs, "02:00:01:00:00:01/") {
		t.Errorf("A's IMDS MACs %q", macs)
	}
	for _, id := range bENIs {
		if strings.Contains(macs, id) {
			t.Errorf("A's IMDS lists B's ENI %s", id)
		}
	}
	di, err := a.DescribeInstances(bg, &ec2.DescribeInstancesInput{})
	if err != nil {
		t.Fatal(err)
	}
	if insts := di.Reservations[0].Instances; len(insts) != 1 || aws.ToString(insts[0].InstanceId) != a.InstanceID() || len(insts[0].NetworkInterfaces) != 3 {
		t.Errorf("DescribeInstances of A: %+v", insts)
	}
	// EC2 itself is the VPC's: A may describe B by ID, and an ENI of B.
	di, err = a.DescribeInstances(bg, &ec2.DescribeInstancesInput{InstanceIds: []string{b.InstanceID()}})
	if err != nil || aws.ToString(di.Reservations[0].Instances[0].InstanceId) != b.InstanceID() {
		t.Errorf("DescribeInstances of B from A: %v", err)
	}
	dn, err := a.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: bENIs[:1]})
	if err != nil || aws.ToString(dn.NetworkInterfaces[0].Attachment.InstanceId) != b.InstanceID() {
		t.Errorf("describing B's ENI from A: %v", err)
	}
	// ... but a node never frees another's ENI.
	if err := a.Provider().FreeENI(bg, bENIs[0]); err == nil {
		t.Error("A freed B's ENI")
	}
}

// TestVPCAttachToAnotherInstance: the instance ID names which instance
// gets the ENI, with that instance's device numbers and hook.
func TestVPCAttachToAnotherInstance(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	var hooked []string
	a := mustLaunch(t, v, "m5.4xlarge", Options{})
	b := mustLaunch(t, v, "t3.medium", Options{OnAttach: func(e cloud.ENI) { hooked = append(hooked, e.ID) }})
	id := createENI(t, a, mustInstance(t, a).SubnetID)
	_, err := a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(id), InstanceId: aws.String(b.InstanceID()), DeviceIndex: aws.Int32(3)})
	wantCode(t, err, "InvalidParameterValue") // t3.medium's devices are 0 to 2
	if _, err := a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(id), InstanceId: aws.String(b.InstanceID()), DeviceIndex: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	if ib := mustInstance(t, b); len(ib.ENIs) != 2 || ib.ENIs[1].ID != id || len(mustInstance(t, a).ENIs) != 1 || !slices.Equal(hooked, []string{id}) {
		t.Errorf("B %+v, hooked %v", ib.ENIs, hooked)
	}
	// B's slots, not the caller's, bound it.
	mustAllocENI(t, b)
	other := createENI(t, a, mustInstance(t, a).SubnetID)
	_, err = a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(other), InstanceId: aws.String(b.InstanceID()), DeviceIndex: aws.Int32(2)})
	wantCode(t, err, cloud.CodeAttachmentLimitExceeded)
}

func TestVPCHolder(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a := mustLaunch(t, v, "m5.large", Options{})
	ia := mustInstance(t, a)
	e := mustAllocENI(t, a)
	ips := mustAssign(t, a, e.ID, 1)
	pfx, err := a.Provider().AssignIPv4Prefixes(bg, e.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := a.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(e.ID), Ipv6PrefixCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	v6p := netip.MustParsePrefix(v6.AssignedIpv6Prefixes[0])
	for _, tc := range []struct {
		a   netip.Addr
		eni string
	}{
		{ia.ENIs[0].PrimaryIP, ia.ENIs[0].ID},
		{e.PrimaryIP, e.ID},
		{ips[0], e.ID},
		{pfx[0].Addr().Next().Next(), e.ID},
		{v6p.Addr().Next(), e.ID},
		{netip.AddrFrom16(ips[0].As16()), e.ID}, // IPv4-mapped
	} {
		if id, eni, ok := v.Holder(tc.a); !ok || id != a.InstanceID() || eni != tc.eni {
			t.Errorf("Holder(%s) = %q %q %v, want %s", tc.a, id, eni, ok, tc.eni)
		}
	}
	for _, s := range []string{"10.0.0.1", "10.0.200.200", "192.168.0.1", "2600:1f14:a:0:ffff::1"} {
		if id, eni, ok := v.Holder(netip.MustParseAddr(s)); ok || id != "" || eni != "" {
			t.Errorf("Holder(%s) = %q %q %v, want none", s, id, eni, ok)
		}
	}
}

func TestVPCBadInput(t *testing.T) {
	for name, opt := range map[string]VPCOptions{
		"IPv6 CIDR":        {CIDR: netip.MustParsePrefix("2600::/56")},
		"unmasked CIDR":    {CIDR: netip.MustParsePrefix("10.0.0.1/16")},
		"CIDR too big":     {CIDR: netip.MustParsePrefix("10.0.0.0/8")},
		"SubnetBits /29":   {SubnetBits: 29},
		"subnet above VPC": {CIDR: netip.MustParsePrefix("10.0.0.0/20"), SubnetBits: 16},
	} {
		if _, err := NewVPC(opt); err == nil {
			t.Errorf("%s: NewVPC succeeded", name)
		}
	}
	v := mustVPC(t, VPCOptions{CIDR: netip.MustParsePrefix("10.9.0.0/28")})
	for name, tc := range map[string]struct {
		typ  string
		opt  Options
		want string
	}{
		"unknown type": {"m9.huge", Options{}, "unknown instance type"},
		"SubnetBits":   {"m5.large", Options{SubnetBits: 24}, "SubnetBits"},
		"other region": {"m5.large", Options{Region: "eu-west-1"}, "region"},
	} {
		if _, err := v.Launch(tc.typ, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Launch err %v, want %q", name, err, tc.want)
		}
	}
	// A /28 has 11 free addresses: 11 instances, then RunInstances fails.
	for range 11 {
		mustLaunch(t, v, "m5.large", Options{Region: "us-west-2"})
	}
	_, err := v.Launch("m5.large", Options{})
	wantCode(t, err, cloud.CodeInsufficientFreeAddresses)
	if n := len(v.Instances()); n != 11 {
		t.Errorf("%d instances", n)
	}
}
