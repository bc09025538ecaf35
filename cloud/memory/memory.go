// Package memory is an in-memory cloud for tests, scenarios and the
// --cloud memory mode of ipamd: one instance of a known type with all its
// ENIs attached and every secondary IPv4 address assigned, so the pool is
// full from the start (warm-pool management comes later).
//
// Everything is deterministic (IDs, MACs, addresses): a scenario replayed
// tomorrow gives the same pod the same address, and a failing run's log
// can be compared line by line with a passing one.
package memory

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpccni/vpccni/cloud"
)

// Limits are an instance type's ENI limits as EC2 publishes them.
type Limits struct {
	ENIs       int // network interfaces the instance can attach
	IPv4PerENI int // IPv4 addresses per interface, the primary one included
}

// limits holds the few types the tests and scenarios use. Unexported so
// no caller can change EC2's numbers under another's feet.
var limits = map[string]Limits{
	"t3.medium":   {ENIs: 3, IPv4PerENI: 6},
	"m5.large":    {ENIs: 3, IPv4PerENI: 10},
	"m5.4xlarge":  {ENIs: 8, IPv4PerENI: 30},
	"c5.18xlarge": {ENIs: 15, IPv4PerENI: 50},
}

// PrimaryIPv6Prefix is the /80 delegated to the primary ENI, for IPv6
// mode. It is fixed so IPv6 scenarios are as reproducible as IPv4 ones.
var PrimaryIPv6Prefix = netip.MustParsePrefix("2600:1f14:a:1::/80")

// Known lists the known instance types, sorted.
func Known() []string {
	ks := make([]string, 0, len(limits))
	for k := range limits {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// LimitsOf returns the limits of a known instance type.
func LimitsOf(instanceType string) (Limits, bool) {
	l, ok := limits[instanceType]
	return l, ok
}

// Cloud is the in-memory cloud of one instance. It never changes after
// New, so it is safe for concurrent use.
type Cloud struct{ inst cloud.Instance }

// Options varies the instance New builds.
type Options struct {
	// Trunk attaches a trunk ENI (security groups for pods) in the
	// instance type's last ENI slot, as the VPC resource controller does:
	// that slot then carries branch ENIs' VLANs instead of pod addresses.
	Trunk bool
}

// New builds an instance of the given type with every ENI attached. ENI
// device d lives in subnet 10.0.(d+1).0/24 with gateway 10.0.(d+1).1 and
// primary address 10.0.(d+1).10; its pod addresses are 10.0.(d+1).11
// onwards, IPv4PerENI-1 of them; its MAC is 02:00:00:00:<d>:01.
func New(instanceType string) (*Cloud, error) {
	return NewWithOptions(instanceType, Options{})
}

// NewWithOptions is New with options. With Trunk, the last device (2 on an
// m5.large) is the trunk ENI: same subnet, MAC and primary-address scheme
// as the others, no pod addresses and no IPv6 prefix.
func NewWithOptions(instanceType string, opt Options) (*Cloud, error) {
	lim, ok := limits[instanceType]
	if !ok {
		return nil, fmt.Errorf("memory cloud: unknown instance type %q (known: %s)", instanceType, strings.Join(Known(), ", "))
	}
	trunk := -1
	if opt.Trunk {
		if lim.ENIs < 2 {
			// The primary ENI must keep its pod addresses.
			return nil, fmt.Errorf("memory cloud: %s has %d ENI slot(s), too few for a trunk ENI", instanceType, lim.ENIs)
		}
		trunk = lim.ENIs - 1
	}
	inst := cloud.Instance{ID: "i-" + hexID(instanceType), Type: instanceType}
	for d := range lim.ENIs {
		addr := func(host byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(d + 1), host}) }
		eni := cloud.ENI{
			ID:           "eni-" + hexID(fmt.Sprintf("%s/%d", instanceType, d)),
			MAC:          fmt.Sprintf("02:00:00:00:%02x:01", d),
			DeviceNumber: d,
			PrimaryIP:    addr(10),
			Subnet:       netip.PrefixFrom(addr(0), 24),
			Gateway:      addr(1),
		}
		if d == trunk {
			eni.Trunk = true
			inst.ENIs = append(inst.ENIs, eni)
			continue
		}
		for i := 1; i < lim.IPv4PerENI; i++ {
			eni.IPv4 = append(eni.IPv4, addr(byte(10+i)))
		}
		if d == 0 {
			eni.IPv6Prefixes = []netip.Prefix{PrimaryIPv6Prefix}
		}
		inst.ENIs = append(inst.ENIs, eni)
	}
	return &Cloud{inst: inst}, nil
}

// hexID makes an EC2-shaped resource ID suffix (17 hex digits, leading 0)
// that depends only on its seed.
func hexID(seed string) string {
	h := fnv.New64a()
	h.Write([]byte(seed))
	return fmt.Sprintf("0%016x", h.Sum64())
}

// Instance returns a deep copy of the instance, so a caller that modifies
// it cannot change what the next caller sees.
func (c *Cloud) Instance(context.Context) (cloud.Instance, error) {
	out := c.inst
	out.ENIs = make([]cloud.ENI, len(c.inst.ENIs))
	for i, e := range c.inst.ENIs {
		e.IPv4 = slices.Clone(e.IPv4)
		e.IPv6Prefixes = slices.Clone(e.IPv6Prefixes)
		out.ENIs[i] = e
	}
	return out, nil
}

var _ cloud.Inventory = (*Cloud)(nil)
