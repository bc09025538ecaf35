package memory

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/vpccni/vpccni/cloud"
)

// vpc is the state the instances of one VPC share: its CIDR blocks,
// subnets and ENIs, and the counters that number what they create. Each
// Cloud points to one; New's instance is alone in a VPC of its own.
type vpc struct {
	mu     sync.Mutex     // guards everything below and every Cloud's mutable state
	cidrs  []netip.Prefix // the IPv4 blocks, the primary first, as IMDS lists them
	id     string
	region string
	sg     string // the nodes' security group, the only one the VPC has
	// seed prefixes the IDs of created ENIs and of attachments: New's
	// VPC uses the instance type, so New's IDs are what they always were.
	seed string

	subnets     map[string]*subnet
	enis        map[string]*eni
	available   map[string]*eni   // ENIs attached to no instance, so AvailableENIs does not scan them all
	attachments map[string]*eni   // by attachment ID, so DetachNetworkInterface does not scan
	instances   map[string]*Cloud // running instances by ID
	launched    int               // instances launched: numbers their IDs and MACs
	created     int               // ENIs created through the API: numbers their IDs and MACs
	attachCount int               // attachments made: numbers their IDs
}

func newVPC(cidr netip.Prefix, region, seed string) *vpc {
	return &vpc{
		cidrs: []netip.Prefix{cidr}, id: "vpc-" + hexID(cidr.String()), region: region, seed: seed,
		sg:      "sg-" + hexID("node security group"),
		subnets: map[string]*subnet{}, enis: map[string]*eni{}, available: map[string]*eni{},
		attachments: map[string]*eni{}, instances: map[string]*Cloud{},
	}
}

// newInstance makes the Cloud of an instance (without ENIs yet).
func (v *vpc) newInstance(typ string, lim cloud.Limits, opt Options, number int, seed string) *Cloud {
	return &Cloud{
		vpc: v, opt: opt, typ: typ, limits: lim, number: number, seed: seed,
		instanceID: "i-" + hexID(seed),
		attached:   map[string]*eni{}, faults: map[string]Fault{},
	}
}

// addSubnet adds a subnet. Its IPv6 /64 is newSubnet's unless another
// subnet has that one (subnets in two blocks, 10.0.0.0/16 and
// 10.1.0.0/16, derive the same): then the next free /64, so no two
// subnets delegate the same /80 and Holder finds one holder.
func (v *vpc) addSubnet(cidr netip.Prefix) *subnet {
	s := newSubnet(cidr)
	taken := map[netip.Prefix]bool{}
	for _, o := range v.subnets {
		taken[o.ipv6] = true
	}
	for taken[s.ipv6] {
		b := s.ipv6.Addr().As16()
		i := (int(b[6])<<8 | int(b[7])) + 1
		b[6], b[7] = byte(i>>8), byte(i)
		s.ipv6 = netip.PrefixFrom(netip.AddrFrom16(b), 64)
	}
	v.subnets[s.id] = s
	return s
}

// addENI records a new, unattached ENI. IDs are hashes of their seeds;
// a collision would silently merge two ENIs, so it stops the model.
func (v *vpc) addENI(e *eni) {
	if _, dup := v.enis[e.id]; dup {
		panic("memory cloud: ENI ID collision on " + e.id)
	}
	v.enis[e.id] = e
	v.available[e.id] = e
}

// attach attaches e to inst at device, keeping the indexes. The caller
// has checked that e is unattached and the device free.
func (v *vpc) attach(e *eni, inst *Cloud, device int, deleteOnTermination bool) {
	v.attachCount++
	e.att = &attachment{
		id:     "eni-attach-" + hexID(fmt.Sprintf("%s/attach/%d", v.seed, v.attachCount)),
		inst:   inst,
		device: device, deleteOnTermination: deleteOnTermination,
	}
	inst.attached[e.id] = e
	v.attachments[e.att.id] = e
	delete(v.available, e.id)
}

// detach makes an attached ENI available, keeping its addresses.
func (v *vpc) detach(e *eni) {
	delete(e.att.inst.attached, e.id)
	delete(v.attachments, e.att.id)
	e.att = nil
	v.available[e.id] = e
}

// deleteENI deletes an unattached ENI and gives everything it holds back
// to its subnet.
func (v *vpc) deleteENI(e *eni) {
	s := v.subnets[e.subnetID]
	s.release(e.primary)
	s.release(e.secondary...)
	for _, p := range e.prefixes {
		s.markPrefix(p, nil)
	}
	for _, p := range e.v6prefixes {
		s.releaseV6(p)
	}
	delete(v.enis, e.id)
	delete(v.available, e.id)
}

// sortedByID returns ENIs by ID, so every answer lists them in one order.
func sortedByID(enis map[string]*eni) []*eni {
	out := slices.Collect(maps.Values(enis))
	slices.SortFunc(out, func(a, b *eni) int { return strings.Compare(a.id, b.id) })
	return out
}

// VPC is a VPC many instances share, for a fleet of nodes: one or more
// IPv4 CIDR blocks (the primary and up to four secondary ones, EC2's
// default quota), one subnet in each that instances launch into, ENIs
// that outlive their instance unless DeleteOnTermination is set. An
// instance launches into the subnet with the most free addresses and
// takes all its addresses from it, lowest free first, so an address one
// node gives back is the next another node of that subnet gets. It is
// safe for concurrent use.
type VPC struct {
	v       *vpc
	subnets []*subnet // one per block, in the blocks' order
}

// VPCOptions shape NewVPC's VPC.
type VPCOptions struct {
	// CIDR is the VPC's primary IPv4 block (a /16 to /28); zero means
	// VPCCIDR.
	CIDR netip.Prefix
	// Secondary are the IPv4 blocks associated with the VPC besides the
	// primary (each a /16 to /28, overlapping no other), at most
	// MaxSecondaryCIDRs. Each holds one subnet covering the whole block:
	// a VPC outgrows one /16 (a 1,000-node fleet needs ~150k addresses)
	// by adding blocks, as on EC2.
	Secondary []netip.Prefix
	// SubnetBits is the prefix length of the primary block's subnet, its
	// first block of that size; 0 means the block's own length (one
	// subnet covering it). At most 28.
	SubnetBits int
	// Region is where the VPC lies; empty means us-west-2.
	Region string
}

// MaxSecondaryCIDRs is how many secondary IPv4 blocks a VPC may have:
// EC2's default quota is five IPv4 blocks per VPC, the primary included.
const MaxSecondaryCIDRs = 4

// NewVPC builds an empty VPC with a subnet in each of its blocks.
func NewVPC(opt VPCOptions) (*VPC, error) {
	if !opt.CIDR.IsValid() {
		opt.CIDR = VPCCIDR
	}
	if err := checkBlock(opt.CIDR); err != nil {
		return nil, fmt.Errorf("memory cloud: VPC CIDR %s: %w", opt.CIDR, err)
	}
	if len(opt.Secondary) > MaxSecondaryCIDRs {
		return nil, fmt.Errorf("memory cloud: %d secondary CIDR blocks: EC2's default quota is %d IPv4 blocks per VPC, the primary and %d secondary",
			len(opt.Secondary), MaxSecondaryCIDRs+1, MaxSecondaryCIDRs)
	}
	blocks := []netip.Prefix{opt.CIDR}
	for i, b := range opt.Secondary {
		if err := checkBlock(b); err != nil {
			return nil, fmt.Errorf("memory cloud: secondary CIDR block %d (%s): %w", i, b, err)
		}
		for _, o := range blocks {
			if o.Overlaps(b) {
				return nil, fmt.Errorf("memory cloud: secondary CIDR block %d (%s) overlaps %s: a VPC's blocks are disjoint", i, b, o)
			}
		}
		blocks = append(blocks, b)
	}
	if opt.SubnetBits == 0 {
		opt.SubnetBits = opt.CIDR.Bits()
	}
	if opt.SubnetBits < opt.CIDR.Bits() || opt.SubnetBits > 28 {
		return nil, fmt.Errorf("memory cloud: SubnetBits %d: EC2 subnets are /%d (the VPC) to /28", opt.SubnetBits, opt.CIDR.Bits())
	}
	if opt.Region == "" {
		opt.Region = defaultRegion
	}
	v := newVPC(opt.CIDR, opt.Region, "vpc "+opt.CIDR.String())
	v.cidrs = blocks
	p := &VPC{v: v, subnets: []*subnet{v.addSubnet(netip.PrefixFrom(opt.CIDR.Addr(), opt.SubnetBits))}}
	for _, b := range opt.Secondary {
		p.subnets = append(p.subnets, v.addSubnet(b))
	}
	return p, nil
}

// checkBlock says why a prefix cannot be a VPC's IPv4 block, if it cannot.
func checkBlock(b netip.Prefix) error {
	if !b.IsValid() || !b.Addr().Is4() || b != b.Masked() || b.Bits() < 16 || b.Bits() > 28 {
		return fmt.Errorf("EC2 VPC blocks are masked IPv4 /16 to /28 blocks")
	}
	return nil
}

// CIDR is the VPC's primary IPv4 block.
func (p *VPC) CIDR() netip.Prefix { return p.v.cidrs[0] }

// CIDRs are the VPC's IPv4 blocks, the primary first.
func (p *VPC) CIDRs() []netip.Prefix { return slices.Clone(p.v.cidrs) }

// maxLaunches bounds the launch number, which fills two bytes of the MAC.
const maxLaunches = 1<<16 - 1

// Launch starts a bare instance of the type in the VPC's subnet with the
// most free addresses, the earlier block's on a tie (as Options.Bare:
// the primary ENI with the subnet's lowest free address, and the trunk
// ENI in device 1 if opt.Trunk) and returns its EC2 and IMDS. The
// instance's later ENIs are created in its primary ENI's subnet, as
// ipamd asks (cloud.Instance.SubnetID), so all its addresses come from
// there. Launch number n (from 1) gives instance ID i-<hexID("instance/n")>,
// launch ENIs eni-<hexID("instance/n/<device>")> with MAC
// 02:<n hi>:<n lo>:00:<device>:01. opt.Bare is implied; opt.SubnetBits is
// refused, and so is an opt.Region other than the VPC's.
func (p *VPC) Launch(instanceType string, opt Options) (*Cloud, error) {
	v := p.v
	lim, err := checkType(instanceType, opt.Trunk)
	if err != nil {
		return nil, err
	}
	if opt.SubnetBits != 0 {
		return nil, fmt.Errorf("memory cloud: Launch with SubnetBits %d: a VPC's instances share its subnets (VPCOptions.SubnetBits)", opt.SubnetBits)
	}
	if opt.Region != "" && opt.Region != v.region {
		return nil, fmt.Errorf("memory cloud: Launch in region %s: the VPC is in %s", opt.Region, v.region)
	}
	opt.Bare, opt.Region = true, v.region
	v.mu.Lock()
	if v.launched >= maxLaunches {
		v.mu.Unlock()
		return nil, fmt.Errorf("memory cloud: Launch: %d instances launched, the model's most", v.launched)
	}
	number := v.launched + 1
	c := v.newInstance(instanceType, lim, opt, number, fmt.Sprintf("instance/%d", number))
	s := p.roomiest()
	if need := c.launchENIs(); s.available() < need {
		v.mu.Unlock()
		// As RunInstances fails, and without using up a launch number.
		return nil, apiError("RunInstances", cloud.CodeInsufficientFreeAddresses, "Insufficient free IP addresses in subnet %s for %d ENI(s)", s.id, need)
	}
	v.launched = number
	c.launchBare(s)
	v.instances[c.instanceID] = c
	v.mu.Unlock()
	c.provider = cloud.NewProvider(c, c, opt.Provider)
	return c, nil
}

// roomiest is the subnet with the most free addresses, the first on a
// tie, so launches spread over the blocks in an order a replay repeats.
// The caller holds p.v.mu.
func (p *VPC) roomiest() *subnet {
	best := p.subnets[0]
	for _, s := range p.subnets[1:] {
		if s.available() > best.available() {
			best = s
		}
	}
	return best
}

// Terminate ends a running instance as EC2 does: its attached ENIs with
// DeleteOnTermination are deleted (their addresses and prefixes go back
// to their subnet), the others are detached and become available, keeping
// their addresses. OnDetach is not called: the node is gone. From then
// on the instance's Cloud fails every EC2 call with
// InvalidInstanceID.NotFound and every IMDS read as unreachable.
func (p *VPC) Terminate(instanceID string) error {
	v := p.v
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.instances[instanceID]
	if !ok {
		return apiError("TerminateInstances", codeInstanceNotFound, "The instance ID '%s' does not exist or is terminated", instanceID)
	}
	for _, e := range sortedByID(c.attached) {
		dot := e.att.deleteOnTermination
		v.detach(e)
		if dot {
			v.deleteENI(e)
		}
	}
	c.terminated = true
	delete(v.instances, instanceID)
	return nil
}

// Instances lists the running instances' IDs, sorted.
func (p *VPC) Instances() []string {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	return slices.Sorted(maps.Keys(p.v.instances))
}

// StrandedENI is an ENI attached to no instance, as AvailableENIs lists
// it: what it holds in the subnet, and its tags (TagInstanceID names the
// node that created it).
type StrandedENI struct {
	ID, MAC, SubnetID, Description string
	Trunk                          bool
	PrimaryIP                      netip.Addr
	IPv4                           []netip.Addr   // secondary addresses, sorted
	IPv4Prefixes                   []netip.Prefix // sorted
	IPv6Prefixes                   []netip.Prefix // sorted
	Tags                           map[string]string
}

// AvailableENIs lists the ENIs attached to no instance, sorted by ID:
// what a gone node or a failed allocation left holding addresses.
func (p *VPC) AvailableENIs() []StrandedENI {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	out := []StrandedENI{}
	for _, e := range sortedByID(p.v.available) {
		out = append(out, StrandedENI{
			ID: e.id, MAC: e.mac, SubnetID: e.subnetID, Description: e.description, Trunk: e.trunk,
			PrimaryIP: e.primary, IPv4: slices.Clone(e.secondary),
			IPv4Prefixes: slices.Clone(e.prefixes), IPv6Prefixes: slices.Clone(e.v6prefixes),
			Tags: maps.Clone(e.tags),
		})
	}
	return out
}

// Holder tells which ENI holds an address in EC2 (an IPv4 primary or
// secondary address, an IPv4 address inside a delegated /28, an IPv6
// address inside a delegated /80) and the instance that ENI is attached
// to. ok is false when no ENI holds it; instanceID is "" when the ENI is
// available (stranded).
func (p *VPC) Holder(a netip.Addr) (instanceID, eniID string, ok bool) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	a = a.Unmap()
	var e *eni
	for _, s := range p.v.subnets {
		switch {
		case a.Is4() && s.cidr.Contains(a):
			e = s.used[a]
		case a.Is6() && s.ipv6.Contains(a):
			e = s.usedV6[netip.PrefixFrom(a, 80).Masked()]
		}
		if e != nil {
			break
		}
	}
	if e == nil {
		return "", "", false
	}
	if e.att != nil {
		instanceID = e.att.inst.instanceID
	}
	return instanceID, e.id, true
}
