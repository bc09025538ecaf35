package memory

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// blockOf is the index of the VPC block holding a.
func blockOf(v *VPC, a netip.Addr) int {
	return slices.IndexFunc(v.CIDRs(), func(b netip.Prefix) bool { return b.Contains(a) })
}

// Each launch goes to the subnet with the most free addresses, the
// earlier block's on a tie; the instance's next ENI and addresses come
// from that subnet too.
func TestVPCLaunchSpreadsOverBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  VPCOptions
		want string // the block of each launch, in order
	}{
		{"primary alone", VPCOptions{CIDR: pfx("10.0.0.0/24")[0]}, "000"},
		{"equal blocks alternate", VPCOptions{CIDR: pfx("10.0.0.0/24")[0], Secondary: pfx("10.1.0.0/24")}, "0101"},
		{"three equal blocks", VPCOptions{Secondary: pfx("10.1.0.0/16", "10.2.0.0/16")}, "012012"},
		// A /27 has 27 free addresses, a /28 11: the /27 takes launches
		// until the two are level, then they alternate.
		{"the roomier first", VPCOptions{CIDR: pfx("10.0.0.0/28")[0], Secondary: pfx("172.16.0.0/27")}, strings.Repeat("1", 16) + "0101"},
		{"SubnetBits narrows the primary's subnet", VPCOptions{SubnetBits: 27, Secondary: pfx("10.1.0.0/27")}, "0101"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := mustVPC(t, tc.opt)
			var got strings.Builder
			for range len(tc.want) {
				c := mustLaunch(t, v, "m5.large", Options{})
				inst := mustInstance(t, c)
				b := blockOf(v, inst.ENIs[0].PrimaryIP)
				got.WriteByte(byte('0' + b))
				if !v.CIDRs()[b].Contains(inst.ENIs[0].Subnet.Addr()) {
					t.Fatalf("%s: primary %s outside its subnet %s", c.InstanceID(), inst.ENIs[0].PrimaryIP, inst.ENIs[0].Subnet)
				}
			}
			if got.String() != tc.want {
				t.Errorf("launches went to blocks %s, want %s", got.String(), tc.want)
			}
		})
	}
	// Later ENIs and addresses: the instance's own subnet.
	v := mustVPC(t, VPCOptions{CIDR: pfx("10.0.0.0/24")[0], Secondary: pfx("10.1.0.0/24")})
	for range 2 {
		c := mustLaunch(t, v, "m5.large", Options{})
		inst := mustInstance(t, c)
		e := mustAllocENI(t, c)
		ips := mustAssign(t, c, e.ID, 3)
		pf, err := c.Provider().AssignIPv4Prefixes(bg, inst.ENIs[0].ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		if e.SubnetID != inst.SubnetID || e.Subnet != inst.ENIs[0].Subnet {
			t.Errorf("%s: ENI in %s %s, primary in %s %s", c.InstanceID(), e.SubnetID, e.Subnet, inst.SubnetID, inst.ENIs[0].Subnet)
		}
		for _, a := range append(ips, e.PrimaryIP, pf[0].Addr()) {
			if !inst.ENIs[0].Subnet.Contains(a) {
				t.Errorf("%s: %s outside its subnet %s", c.InstanceID(), a, inst.ENIs[0].Subnet)
			}
		}
	}
}

// What a node of one subnet gives back is the next address a node of
// that subnet gets; a node of another subnet never gets it.
func TestVPCAddressStaysInItsSubnet(t *testing.T) {
	v := mustVPC(t, VPCOptions{CIDR: pfx("10.0.0.0/24")[0], Secondary: pfx("10.1.0.0/24")})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	c, d := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	ea, eb, ec, ed := mustAllocENI(t, a), mustAllocENI(t, b), mustAllocENI(t, c), mustAllocENI(t, d)
	fromA, fromB := mustAssign(t, a, ea.ID, 4), mustAssign(t, b, eb.ID, 4)
	if blockOf(v, fromA[0]) != 0 || blockOf(v, fromB[0]) != 1 {
		t.Fatalf("A got %v, B %v: want blocks 0 and 1", fromA, fromB)
	}
	if err := a.Provider().UnassignIPv4(bg, ea.ID, fromA[1:2]); err != nil {
		t.Fatal(err)
	}
	if err := b.Provider().UnassignIPv4(bg, eb.ID, fromB[2:3]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who  *Cloud
		eni  string
		want netip.Addr
	}{
		{d, ed.ID, fromB[2]}, // D shares B's subnet: B's address, not A's lower one
		{c, ec.ID, fromA[1]},
	} {
		if got := mustAssign(t, tc.who, tc.eni, 1); got[0] != tc.want {
			t.Errorf("%s got %s, want %s", tc.who.InstanceID(), got[0], tc.want)
		}
		if id, _, ok := v.Holder(tc.want); !ok || id != tc.who.InstanceID() {
			t.Errorf("Holder(%s) = %s %v, want %s", tc.want, id, ok, tc.who.InstanceID())
		}
	}
}

// IMDS lists every block, the primary first, on an instance of any
// subnet; EC2 describes every subnet, each with an IPv6 /64 of its own.
func TestVPCBlocksInIMDSAndDescribe(t *testing.T) {
	blocks := pfx("10.0.0.0/16", "10.1.0.0/16", "192.168.0.0/16")
	v := mustVPC(t, VPCOptions{CIDR: blocks[0], Secondary: blocks[1:]})
	if !slices.Equal(v.CIDRs(), blocks) || v.CIDR() != blocks[0] {
		t.Fatalf("CIDRs %v, CIDR %s", v.CIDRs(), v.CIDR())
	}
	var subnets []string
	for i := range blocks {
		c := mustLaunch(t, v, "m5.large", Options{})
		inst := mustInstance(t, c)
		if !slices.Equal(inst.VPCCIDRs, blocks) {
			t.Errorf("instance %d: VPCCIDRs %v, want %v", i, inst.VPCCIDRs, blocks)
		}
		mac := inst.ENIs[0].MAC
		for key, want := range map[string]string{
			"vpc-ipv4-cidr-blocks":   "10.0.0.0/16\n10.1.0.0/16\n192.168.0.0/16",
			"vpc-ipv4-cidr-block":    "10.0.0.0/16",
			"subnet-ipv4-cidr-block": blocks[i].String(), // launch i went to block i
		} {
			if got, err := metadataLines(c, "network/interfaces/macs/"+mac+"/"+key); err != nil || got != want {
				t.Errorf("instance %d: %s = %q, %v; want %q", i, key, got, err, want)
			}
		}
		subnets = append(subnets, inst.SubnetID)
	}
	c := mustLaunch(t, v, "m5.large", Options{})
	out, err := c.DescribeSubnets(bg, &ec2.DescribeSubnetsInput{})
	if err != nil || len(out.Subnets) != 3 {
		t.Fatalf("DescribeSubnets: %v, %v", out, err)
	}
	v6 := map[string]bool{}
	for _, s := range out.Subnets {
		if !slices.Contains(subnets, aws.ToString(s.SubnetId)) || aws.ToString(s.VpcId) != aws.ToString(out.Subnets[0].VpcId) {
			t.Errorf("subnet %s in %s", aws.ToString(s.SubnetId), aws.ToString(s.VpcId))
		}
		v6[aws.ToString(s.Ipv6CidrBlockAssociationSet[0].Ipv6CidrBlock)] = true
	}
	if len(v6) != 3 {
		t.Errorf("IPv6 /64s %v: want one per subnet", v6)
	}
}

// Terminate, AvailableENIs and Holder work in a secondary block's subnet.
func TestVPCTerminateInASecondaryBlock(t *testing.T) {
	v := mustVPC(t, VPCOptions{CIDR: pfx("10.0.0.0/24")[0], Secondary: pfx("10.1.0.0/24")})
	mustLaunch(t, v, "m5.large", Options{})
	b := mustLaunch(t, v, "m5.large", Options{})
	subnetID := mustInstance(t, b).SubnetID
	kept := createENI(t, b, subnetID)
	if _, err := b.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(kept), InstanceId: aws.String(b.InstanceID()), DeviceIndex: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	ips := mustAssign(t, b, kept, 2)
	dot := mustAllocENI(t, b)
	gone := mustAssign(t, b, dot.ID, 2)
	if blockOf(v, ips[0]) != 1 || blockOf(v, gone[0]) != 1 {
		t.Fatalf("B's addresses %v %v: want block 1", ips, gone)
	}
	before := available(t, b, subnetID)
	if err := v.Terminate(b.InstanceID()); err != nil {
		t.Fatal(err)
	}
	st := v.AvailableENIs()
	if len(st) != 1 || st[0].ID != kept || st[0].SubnetID != subnetID || !slices.Equal(st[0].IPv4, ips) {
		t.Fatalf("stranded %+v", st)
	}
	if id, eni, ok := v.Holder(ips[0]); !ok || id != "" || eni != kept {
		t.Errorf("Holder(%s) = %q %s %v: want the stranded ENI", ips[0], id, eni, ok)
	}
	if _, _, ok := v.Holder(gone[0]); ok {
		t.Errorf("%s still held after its ENI was deleted", gone[0])
	}
	// B's primary ENI and the deleted one gave back 1+1+2 addresses.
	c := mustLaunch(t, v, "m5.large", Options{})
	if got := available(t, c, subnetID); got != before+4 {
		t.Errorf("subnet %s: %d free, want %d", subnetID, got, before+4)
	}
}

// Each bad secondary block is refused, naming the block and why.
func TestVPCBadSecondary(t *testing.T) {
	for _, tc := range []struct {
		name      string
		secondary []netip.Prefix
		want      string
	}{
		{"unmasked", pfx("10.1.0.1/16"), "secondary CIDR block 0 (10.1.0.1/16): EC2 VPC blocks are masked IPv4 /16 to /28"},
		{"too big", pfx("10.2.0.0/15"), "secondary CIDR block 0 (10.2.0.0/15): EC2 VPC blocks are masked IPv4 /16 to /28"},
		{"too small", pfx("10.1.0.0/29"), "(10.1.0.0/29): EC2 VPC blocks"},
		{"IPv6", pfx("2600::/56"), "(2600::/56): EC2 VPC blocks"},
		{"zero", []netip.Prefix{{}}, "secondary CIDR block 0 (invalid Prefix)"},
		{"overlaps the primary", pfx("10.0.128.0/17"), "secondary CIDR block 0 (10.0.128.0/17) overlaps 10.0.0.0/16"},
		{"overlaps another", pfx("10.1.0.0/16", "10.1.4.0/24"), "secondary CIDR block 1 (10.1.4.0/24) overlaps 10.1.0.0/16"},
		{"the same twice", pfx("10.1.0.0/16", "10.1.0.0/16"), "secondary CIDR block 1 (10.1.0.0/16) overlaps 10.1.0.0/16"},
		{"over the quota", pfx("10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16", "10.5.0.0/16"), "5 secondary CIDR blocks: EC2's default quota is 5 IPv4 blocks per VPC"},
	} {
		_, err := NewVPC(VPCOptions{Secondary: tc.secondary})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewVPC err %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewVPC(VPCOptions{Secondary: pfx("10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16")}); err != nil {
		t.Errorf("four secondary blocks, the quota: %v", err)
	}
}

// A thousand m5.4xlarge nodes of ~150 addresses each (their 110 pods and
// a warm ENI) need ~150k addresses: more than one /16 holds, within three.
// Allocated through the Provider, as ipamd does; the subnets' search
// hints keep it linear (the time is logged, not judged: a quadratic
// search through a /16 would show as minutes).
func TestVPCThousandNodesInThreeBlocks(t *testing.T) {
	v := mustVPC(t, VPCOptions{Secondary: pfx("10.1.0.0/16", "10.2.0.0/16")})
	start := time.Now()
	perBlock := make([]int, 3)
	for range 1000 {
		c := mustLaunch(t, v, "m5.4xlarge", Options{})
		inst := mustInstance(t, c)
		got := 1 + len(mustAssign(t, c, inst.ENIs[0].ID, 29))
		for range 4 {
			e := mustAllocENI(t, c)
			got += 1 + len(mustAssign(t, c, e.ID, 29))
		}
		if got != 150 {
			t.Fatalf("%s holds %d addresses", c.InstanceID(), got)
		}
		perBlock[blockOf(v, inst.ENIs[0].PrimaryIP)]++
	}
	took := time.Since(start)
	t.Logf("1,000 nodes, 150,000 addresses in %s; nodes per block %v", took, perBlock)
	for b, n := range perBlock {
		if n < 300 {
			t.Errorf("block %d has %d nodes: launches did not spread", b, n)
		}
	}
}
