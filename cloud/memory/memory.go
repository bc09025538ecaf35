// Package memory is an in-memory model of the part of AWS ipamd talks to:
// EC2 (cloud.EC2) and the instance metadata service (cloud.Metadata) of
// one instance, both answered from the same state, so cloud.NewProvider
// runs on it exactly as on a real node. It serves unit tests, the
// scenario engine, and the --cloud memory mode of ipamd. New builds an
// instance alone in its VPC; NewVPC builds a VPC many instances share
// (VPC.Launch), for a fleet of nodes whose addresses move between them,
// with secondary CIDR blocks when one /16 is too small for the fleet.
//
// The model keeps what decides ipamd's behaviour: instance-type limits
// (ENIs, IPv4 addresses per ENI), subnets with EC2's address accounting,
// ENIs with their addresses, prefixes, attachment and tags, and the error
// codes EC2 returns when a limit is hit. Faults (throttling, a full
// subnet, slow attachment) can be injected.
//
// Everything is deterministic (IDs, MACs, the lowest free address first):
// a scenario replayed tomorrow gives the same pod the same address, and a
// failing run's log can be compared line by line with a passing one.
package memory

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"time"

	"github.com/vpccni/vpccni/cloud"
)

// PrimaryIPv6Prefix is the /80 delegated to the primary ENI of a
// prefilled instance, for IPv6 mode, and the first one a bare instance's
// primary ENI gets. It is fixed so IPv6 scenarios are as reproducible as
// IPv4 ones.
var PrimaryIPv6Prefix = netip.MustParsePrefix("2600:1f14:a:1::/80")

// VPCCIDR is the CIDR of New's VPC and the default of NewVPC's; every
// subnet of New's instance lies in it. (It was named VPC before the VPC
// type took the name.)
var VPCCIDR = netip.MustParsePrefix("10.0.0.0/16")

// Known lists the instance types the model knows (cloud's limits table),
// sorted.
func Known() []string { return cloud.KnownTypes() }

// Options vary the instance New builds and how the model behaves.
type Options struct {
	// Trunk attaches a trunk ENI (security groups for pods) as the VPC
	// resource controller does: in the type's last ENI slot of a
	// prefilled instance, in device 1 of a bare one. It has no pod
	// addresses: that slot carries branch ENIs' VLANs instead.
	Trunk bool
	// Bare starts from a freshly launched instance: only the primary ENI,
	// without secondary addresses, in subnet 10.0.1.0/24. Without Bare
	// the instance is prefilled: every ENI slot attached, every address
	// assigned (see New). VPC.Launch implies it.
	Bare bool
	// SubnetBits is the prefix length of a bare instance's subnet (16 to
	// 28; 0 means 24). A longer one makes a small subnet, for exhaustion
	// tests. VPC.Launch refuses it: the VPC's subnets are VPCOptions'.
	SubnetBits int
	// Region is what IMDS reports; empty means us-west-2 (for VPC.Launch,
	// the VPC's region; another one is refused).
	Region string
	// OnAttach and OnDetach are called after an attach or detach commits,
	// outside the model's lock (they may call the model), with the ENI as
	// it is attached or was until then. The scenario engine makes the
	// ENI's link appear or vanish in the kernel model with them.
	OnAttach func(cloud.ENI)
	OnDetach func(cloud.ENI)
	// Provider tunes the Provider method's cloud.Provider.
	Provider cloud.ProviderOptions
}

// Cloud is the model of one instance: EC2 as that instance's node calls
// it and that instance's IMDS. Its VPC (subnets, ENIs, addresses) may be
// shared with other instances (NewVPC). It is safe for concurrent use.
type Cloud struct {
	vpc        *vpc
	opt        Options
	typ        string
	limits     cloud.Limits
	instanceID string
	number     int    // the VPC's launch number: the MACs of its launch ENIs
	seed       string // seeds the IDs of the instance and its launch ENIs
	provider   cloud.Provider

	// Guarded by vpc.mu.
	attached    map[string]*eni // this instance's ENIs by ID: its IMDS and describes read only these
	terminated  bool
	faults      map[string]Fault
	attachDelay time.Duration
	calls       []Call
}

// New builds a prefilled instance of the given type: every ENI attached,
// every secondary IPv4 address assigned, so the pool is full from the
// start. ENI device d lives in subnet 10.0.(d+1).0/24 with gateway
// 10.0.(d+1).1 and primary address 10.0.(d+1).10; its pod addresses are
// 10.0.(d+1).11 onwards, IPv4PerENI-1 of them; its MAC is
// 02:00:00:00:<d>:01. The primary ENI has PrimaryIPv6Prefix.
func New(instanceType string) (*Cloud, error) {
	return NewWithOptions(instanceType, Options{})
}

// NewWithOptions is New with options. The instance has a VPC of its own.
func NewWithOptions(instanceType string, opt Options) (*Cloud, error) {
	lim, err := checkType(instanceType, opt.Trunk)
	if err != nil {
		return nil, err
	}
	if opt.SubnetBits != 0 && !opt.Bare {
		return nil, fmt.Errorf("memory cloud: SubnetBits %d given without Bare: a prefilled instance's subnets are /24s", opt.SubnetBits)
	}
	if opt.SubnetBits == 0 {
		opt.SubnetBits = 24
	}
	if opt.SubnetBits < VPCCIDR.Bits() || opt.SubnetBits > 28 {
		return nil, fmt.Errorf("memory cloud: SubnetBits %d: EC2 subnets are /%d (the VPC) to /28", opt.SubnetBits, VPCCIDR.Bits())
	}
	if opt.Region == "" {
		opt.Region = defaultRegion
	}
	// A VPC of its own whose IDs are seeded by the type, and instance
	// number 0: the IDs, MACs and addresses New has always given.
	v := newVPC(VPCCIDR, opt.Region, instanceType)
	c := v.newInstance(instanceType, lim, opt, 0, instanceType)
	if opt.Bare {
		c.launchBare(v.addSubnet(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 1, 0}), opt.SubnetBits).Masked()))
	} else {
		c.launchPrefilled()
	}
	v.instances[c.instanceID] = c
	c.provider = cloud.NewProvider(c, c, opt.Provider)
	return c, nil
}

const defaultRegion = "us-west-2"

// checkType returns the type's limits, or why the model cannot run it.
func checkType(instanceType string, trunk bool) (cloud.Limits, error) {
	lim, ok := cloud.LimitsOf(instanceType)
	if !ok {
		return lim, fmt.Errorf("memory cloud: unknown instance type %q (known: %s)", instanceType, strings.Join(Known(), ", "))
	}
	if trunk && lim.ENIs < 2 {
		// The primary ENI must keep its pod addresses.
		return lim, fmt.Errorf("memory cloud: %s has %d ENI slot(s), too few for a trunk ENI", instanceType, lim.ENIs)
	}
	return lim, nil
}

// launchPrefilled builds the instance New documents.
func (c *Cloud) launchPrefilled() {
	trunk := -1
	if c.opt.Trunk {
		trunk = c.limits.ENIs - 1
	}
	for d := range c.limits.ENIs {
		s := c.vpc.addSubnet(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(d + 1), 0}), 24))
		e := c.launchENI(d, s, s.at(10))
		switch {
		case d == trunk:
			e.trunk = true
		case d == 0:
			e.secondary = c.prefill(s, 11, e)
			e.v6prefixes = []netip.Prefix{PrimaryIPv6Prefix}
			s.usedV6[PrimaryIPv6Prefix] = e
		default:
			e.secondary = c.prefill(s, 11, e)
			e.tags[cloud.TagInstanceID] = c.instanceID
			e.tags[cloud.TagManaged] = cloud.TagManagedValue
		}
	}
}

// prefill assigns IPv4PerENI-1 consecutive addresses from offset first.
func (c *Cloud) prefill(s *subnet, first int, e *eni) []netip.Addr {
	var out []netip.Addr
	for i := range c.limits.IPv4PerENI - 1 {
		a := s.at(first + i)
		s.used[a] = e
		out = append(out, a)
	}
	return out
}

// launchBare builds a freshly launched instance in subnet s: the primary
// ENI with the subnet's lowest free address, and the trunk ENI in device
// 1 if asked. The caller has checked that s has the addresses.
func (c *Cloud) launchBare(s *subnet) {
	c.launchENI(0, s, netip.Addr{})
	if c.opt.Trunk {
		c.launchENI(1, s, netip.Addr{}).trunk = true
	}
}

// launchENIs is how many ENIs (and primary addresses) launchBare takes.
func (c *Cloud) launchENIs() int {
	if c.opt.Trunk {
		return 2
	}
	return 1
}

// launchENI creates and attaches one of the ENIs the instance starts with
// (deleted when it terminates, as EC2 does for them), with the given
// primary address or, if that is not valid, the subnet's lowest free one.
// The MAC is 02:<number hi>:<number lo>:00:<device>:01: instance number 0
// (New's) keeps the MACs it always had, and no two launches share one.
func (c *Cloud) launchENI(device int, s *subnet, primary netip.Addr) *eni {
	e := &eni{
		id:       "eni-" + hexID(fmt.Sprintf("%s/%d", c.seed, device)),
		mac:      fmt.Sprintf("02:%02x:%02x:00:%02x:01", byte(c.number>>8), byte(c.number), device),
		subnetID: s.id,
		groups:   []string{c.vpc.sg}, tags: map[string]string{},
	}
	if primary.IsValid() {
		s.used[primary] = e
	} else {
		ip, _ := s.takeAddrs(1, e) // the caller checked there is one
		primary = ip[0]
	}
	e.primary = primary
	c.vpc.addENI(e)
	c.vpc.attach(e, c, device, true)
	return e
}

// hexID makes an EC2-shaped resource ID suffix (17 hex digits, leading 0)
// that depends only on its seed.
func hexID(seed string) string {
	h := fnv.New64a()
	h.Write([]byte(seed))
	return fmt.Sprintf("0%016x", h.Sum64())
}

// Provider returns the cloud.Provider of the instance: cloud.NewProvider
// on this model's EC2 and IMDS, so callers take the same path as on AWS.
func (c *Cloud) Provider() cloud.Provider { return c.provider }

// Instance is the Provider's Instance: what a node reads from IMDS and
// EC2. It is a fresh copy on every call.
func (c *Cloud) Instance(ctx context.Context) (cloud.Instance, error) {
	return c.provider.Instance(ctx)
}

// InstanceID is the instance's ID.
func (c *Cloud) InstanceID() string { return c.instanceID }

var (
	_ cloud.EC2       = (*Cloud)(nil)
	_ cloud.Metadata  = (*Cloud)(nil)
	_ cloud.Inventory = (*Cloud)(nil)
)
