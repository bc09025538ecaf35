// Package memory is an in-memory cloud: one instance of a known type with
// its ENIs attached and every secondary address assigned, so the pool is
// full from the start (no warm-pool management yet). Addresses are
// deterministic, which keeps scenario replays reproducible.
package memory

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/cloud"
)

// Limits are an instance type's ENI limits.
type Limits struct {
	ENIs       int // network interfaces
	IPv4PerENI int // addresses per interface, the primary included
}

// InstanceTypes knows a handful of types (EC2's published limits).
var InstanceTypes = map[string]Limits{
	"t3.medium":   {ENIs: 3, IPv4PerENI: 6},
	"m5.large":    {ENIs: 3, IPv4PerENI: 10},
	"m5.4xlarge":  {ENIs: 8, IPv4PerENI: 30},
	"c5.18xlarge": {ENIs: 15, IPv4PerENI: 50},
}

// Cloud is the in-memory cloud of one instance.
type Cloud struct{ inst cloud.Instance }

// New builds an instance of the given type. ENI device d sits in subnet
// 10.0.(d+1).0/24 with gateway .1, primary address .10 and pod addresses
// from .11 on.
func New(instanceType string) (*Cloud, error) {
	lim, ok := InstanceTypes[instanceType]
	if !ok {
		return nil, fmt.Errorf("unknown instance type %q (known: %s)", instanceType, strings.Join(Known(), ", "))
	}
	inst := cloud.Instance{ID: "i-0vpccni000000001", Type: instanceType}
	for d := 0; d < lim.ENIs; d++ {
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(d + 1), 0}), 24)
		eni := cloud.ENI{
			ID:           fmt.Sprintf("eni-0vpccni%08x", d),
			MAC:          fmt.Sprintf("02:00:00:00:%02x:01", d),
			DeviceNumber: d,
			Subnet:       subnet,
			Gateway:      netip.AddrFrom4([4]byte{10, 0, byte(d + 1), 1}),
			PrimaryIP:    netip.AddrFrom4([4]byte{10, 0, byte(d + 1), 10}),
		}
		for i := 1; i < lim.IPv4PerENI; i++ {
			eni.IPv4 = append(eni.IPv4, netip.AddrFrom4([4]byte{10, 0, byte(d + 1), byte(10 + i)}))
		}
		if d == 0 {
			eni.IPv6Prefixes = []netip.Prefix{netip.MustParsePrefix("2600:1f14:a:b00::/80")}
		}
		inst.ENIs = append(inst.ENIs, eni)
	}
	return &Cloud{inst: inst}, nil
}

// Known lists the known instance types.
func Known() []string {
	var ks []string
	for k := range InstanceTypes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Instance returns a copy of the instance.
func (c *Cloud) Instance(context.Context) (cloud.Instance, error) {
	out := c.inst
	out.ENIs = make([]cloud.ENI, len(c.inst.ENIs))
	for i, e := range c.inst.ENIs {
		e.IPv4 = append([]netip.Addr(nil), e.IPv4...)
		e.IPv6Prefixes = append([]netip.Prefix(nil), e.IPv6Prefixes...)
		out.ENIs[i] = e
	}
	return out, nil
}
