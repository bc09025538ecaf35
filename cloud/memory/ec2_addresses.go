package memory

import (
	"context"
	"net/netip"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

// AssignPrivateIpAddresses assigns secondary addresses (a count or given
// ones) or /28 prefixes (a count or given ones), one kind per call, all
// or nothing. Addresses and prefixes share the type's IPv4PerENI with the
// primary address.
func (c *Cloud) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, _ ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) {
	const api = "AssignPrivateIpAddresses"
	return call(ctx, c, api, func() (*ec2.AssignPrivateIpAddressesOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		kinds := 0
		for _, given := range []bool{in.SecondaryPrivateIpAddressCount != nil, len(in.PrivateIpAddresses) > 0, in.Ipv4PrefixCount != nil, len(in.Ipv4Prefixes) > 0} {
			if given {
				kinds++
			}
		}
		if kinds != 1 {
			return nil, apiError(api, codeInvalidCombination, "give exactly one of SecondaryPrivateIpAddressCount, PrivateIpAddresses, Ipv4PrefixCount, Ipv4Prefixes")
		}
		n := len(in.PrivateIpAddresses) + len(in.Ipv4Prefixes) + int(aws.ToInt32(in.SecondaryPrivateIpAddressCount)) + int(aws.ToInt32(in.Ipv4PrefixCount))
		if n < 1 {
			return nil, apiError(api, codeInvalidParameter, "the count must be at least 1")
		}
		typ, lim := c.limitsOf(e)
		if e.ipv4Slots()+n > lim.IPv4PerENI {
			return nil, apiError(api, cloud.CodeIPAddressLimitExceeded, "Number of private addresses will exceed limit: %s allows %d per interface, %s has %d", typ, lim.IPv4PerENI, e.id, e.ipv4Slots())
		}
		s := c.vpc.subnets[e.subnetID]
		out := &ec2.AssignPrivateIpAddressesOutput{NetworkInterfaceId: aws.String(e.id)}
		if in.SecondaryPrivateIpAddressCount != nil || len(in.PrivateIpAddresses) > 0 {
			ips, err := takeAddrs(api, s, e, n, in.PrivateIpAddresses)
			if err != nil {
				return nil, err
			}
			e.secondary = append(e.secondary, ips...)
			sortAddrs(e.secondary)
			for _, a := range ips {
				out.AssignedPrivateIpAddresses = append(out.AssignedPrivateIpAddresses, types.AssignedPrivateIpAddress{PrivateIpAddress: aws.String(a.String())})
			}
			return out, nil
		}
		pfx, err := takePrefixes(api, s, e, n, in.Ipv4Prefixes)
		if err != nil {
			return nil, err
		}
		e.prefixes = append(e.prefixes, pfx...)
		sortPrefixes(e.prefixes)
		for _, p := range pfx {
			out.AssignedIpv4Prefixes = append(out.AssignedIpv4Prefixes, types.Ipv4PrefixSpecification{Ipv4Prefix: aws.String(p.String())})
		}
		return out, nil
	})
}

// limitsOf returns the type and limits that bound the ENI: those of the
// instance it is attached to, or the caller's for an unattached one.
// The caller holds c.vpc.mu.
func (c *Cloud) limitsOf(e *eni) (string, cloud.Limits) {
	if e.att != nil {
		return e.att.inst.typ, e.att.inst.limits
	}
	return c.typ, c.limits
}

// takeAddrs takes n addresses for e: the given ones, or the lowest free.
func takeAddrs(api string, s *subnet, e *eni, n int, given []string) ([]netip.Addr, error) {
	if len(given) == 0 {
		ips, ok := s.takeAddrs(n, e)
		if !ok {
			return nil, apiError(api, cloud.CodeInsufficientFreeAddresses, "Insufficient free IP addresses in subnet %s: %d asked, %d free", s.id, n, s.available())
		}
		return ips, nil
	}
	ips := make([]netip.Addr, 0, len(given))
	for _, g := range given {
		a, err := netip.ParseAddr(g)
		if err != nil || !s.cidr.Contains(a) {
			return nil, apiError(api, codeInvalidParameter, "Address %q is not in subnet %s (%s)", g, s.id, s.cidr)
		}
		if !s.free(a) || slices.Contains(ips, a) {
			return nil, apiError(api, codeAddressInUse, "Address %s is in use or reserved in subnet %s", a, s.id)
		}
		ips = append(ips, a)
	}
	for _, a := range ips {
		s.used[a] = e
	}
	return ips, nil
}

// takePrefixes takes n /28s for e: the given ones, or the lowest wholly
// free.
func takePrefixes(api string, s *subnet, e *eni, n int, given []string) ([]netip.Prefix, error) {
	if len(given) == 0 {
		pfx, ok := s.takePrefixes(n, e)
		if !ok {
			return nil, apiError(api, cloud.CodeInsufficientCidrBlocks, "There are not enough free cidr blocks in the specified subnet %s to satisfy the request", s.id)
		}
		return pfx, nil
	}
	pfx := make([]netip.Prefix, 0, len(given))
	for _, g := range given {
		p, err := netip.ParsePrefix(g)
		if err != nil || !s.prefixFree(p) || slices.Contains(pfx, p) {
			return nil, apiError(api, codeInvalidParameter, "Prefix %q is not a free /28 of subnet %s (%s)", g, s.id, s.cidr)
		}
		pfx = append(pfx, p)
	}
	for _, p := range pfx {
		s.markPrefix(p, e)
	}
	return pfx, nil
}

// UnassignPrivateIpAddresses gives secondary addresses or /28 prefixes
// back to the subnet, all or nothing: any not on the ENI fails the call.
func (c *Cloud) UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, _ ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error) {
	const api = "UnassignPrivateIpAddresses"
	return call(ctx, c, api, func() (*ec2.UnassignPrivateIpAddressesOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if len(in.PrivateIpAddresses) == 0 && len(in.Ipv4Prefixes) == 0 {
			return nil, apiError(api, codeMissingParameter, "give PrivateIpAddresses or Ipv4Prefixes")
		}
		ips, err := parseOwned(in.PrivateIpAddresses, netip.ParseAddr, e.secondary)
		if err != nil {
			return nil, apiError(api, codeInvalidParameter, "Some of the specified addresses are not assigned to interface %s: %v", e.id, err)
		}
		pfx, err := parseOwned(in.Ipv4Prefixes, netip.ParsePrefix, e.prefixes)
		if err != nil {
			return nil, apiError(api, codeInvalidParameter, "Some of the specified prefixes are not assigned to interface %s: %v", e.id, err)
		}
		s := c.vpc.subnets[e.subnetID]
		s.release(ips...)
		e.secondary = slices.DeleteFunc(e.secondary, func(a netip.Addr) bool { return slices.Contains(ips, a) })
		for _, p := range pfx {
			s.markPrefix(p, nil)
		}
		e.prefixes = slices.DeleteFunc(e.prefixes, func(p netip.Prefix) bool { return slices.Contains(pfx, p) })
		return &ec2.UnassignPrivateIpAddressesOutput{}, nil
	})
}

// notOwnedError names an item the ENI does not hold.
type notOwnedError string

func (e notOwnedError) Error() string { return string(e) }

// parseOwned parses items and checks each is one of owned.
func parseOwned[T comparable](items []string, parse func(string) (T, error), owned []T) ([]T, error) {
	out := make([]T, 0, len(items))
	for _, s := range items {
		v, err := parse(s)
		if err != nil || !slices.Contains(owned, v) {
			return nil, notOwnedError(s)
		}
		out = append(out, v)
	}
	return out, nil
}

// AssignIpv6Addresses delegates IPv6 /80 prefixes (a count or given
// ones) from the subnet's /64. Single IPv6 addresses are not modelled:
// ipamd's IPv6 mode uses prefixes only.
func (c *Cloud) AssignIpv6Addresses(ctx context.Context, in *ec2.AssignIpv6AddressesInput, _ ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error) {
	const api = "AssignIpv6Addresses"
	return call(ctx, c, api, func() (*ec2.AssignIpv6AddressesOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if in.Ipv6AddressCount != nil || len(in.Ipv6Addresses) > 0 {
			return nil, apiError(api, codeUnsupported, "the memory cloud models IPv6 prefixes only, not single addresses")
		}
		if typ, lim := c.limitsOf(e); !lim.IPv6 {
			return nil, apiError(api, codeUnsupported, "%s does not support IPv6", typ)
		}
		if (in.Ipv6PrefixCount != nil) == (len(in.Ipv6Prefixes) > 0) {
			return nil, apiError(api, codeInvalidCombination, "give exactly one of Ipv6PrefixCount, Ipv6Prefixes")
		}
		s := c.vpc.subnets[e.subnetID]
		var pfx []netip.Prefix
		if in.Ipv6PrefixCount != nil {
			n := int(*in.Ipv6PrefixCount)
			ok := n >= 1
			if ok {
				pfx, ok = s.takeV6Prefixes(n, e)
			}
			if !ok {
				return nil, apiError(api, cloud.CodeInsufficientCidrBlocks, "cannot delegate %d /80 prefixes from %s", n, s.ipv6)
			}
		} else {
			for _, g := range in.Ipv6Prefixes {
				p, err := netip.ParsePrefix(g)
				if err != nil || !s.v6Free(p) || slices.Contains(pfx, p) {
					return nil, apiError(api, codeInvalidParameter, "Prefix %q is not a free /80 of %s", g, s.ipv6)
				}
				pfx = append(pfx, p)
			}
			for _, p := range pfx {
				s.usedV6[p] = e
			}
		}
		e.v6prefixes = append(e.v6prefixes, pfx...)
		sortPrefixes(e.v6prefixes)
		out := &ec2.AssignIpv6AddressesOutput{NetworkInterfaceId: aws.String(e.id)}
		for _, p := range pfx {
			out.AssignedIpv6Prefixes = append(out.AssignedIpv6Prefixes, p.String())
		}
		return out, nil
	})
}

// UnassignIpv6Addresses gives IPv6 prefixes back, all or nothing.
func (c *Cloud) UnassignIpv6Addresses(ctx context.Context, in *ec2.UnassignIpv6AddressesInput, _ ...func(*ec2.Options)) (*ec2.UnassignIpv6AddressesOutput, error) {
	const api = "UnassignIpv6Addresses"
	return call(ctx, c, api, func() (*ec2.UnassignIpv6AddressesOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if len(in.Ipv6Addresses) > 0 {
			return nil, apiError(api, codeUnsupported, "the memory cloud models IPv6 prefixes only, not single addresses")
		}
		pfx, err := parseOwned(in.Ipv6Prefixes, netip.ParsePrefix, e.v6prefixes)
		if err != nil {
			return nil, apiError(api, codeInvalidParameter, "Some of the specified prefixes are not assigned to interface %s: %v", e.id, err)
		}
		s := c.vpc.subnets[e.subnetID]
		for _, p := range pfx {
			s.releaseV6(p)
		}
		e.v6prefixes = slices.DeleteFunc(e.v6prefixes, func(p netip.Prefix) bool { return slices.Contains(pfx, p) })
		out := &ec2.UnassignIpv6AddressesOutput{NetworkInterfaceId: aws.String(e.id)}
		for _, p := range pfx {
			out.UnassignedIpv6Prefixes = append(out.UnassignedIpv6Prefixes, p.String())
		}
		return out, nil
	})
}
