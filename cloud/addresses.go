package cloud

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// maxPerCall bounds n so it fits EC2's int32 counts; no instance type has
// anywhere near this many addresses per ENI.
const maxPerCall = 1 << 16

func checkCount(what, eniID string, n int) error {
	if n < 1 || n > maxPerCall {
		return fmt.Errorf("%s on %s: asked for %d, want 1 to %d", what, eniID, n, maxPerCall)
	}
	return nil
}

// AssignIPv4 implements Provider.
func (p *provider) AssignIPv4(ctx context.Context, eniID string, n int) ([]netip.Addr, error) {
	if err := checkCount("AssignIPv4", eniID, n); err != nil {
		return nil, err
	}
	out, err := p.api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId:             aws.String(eniID),
		SecondaryPrivateIpAddressCount: aws.Int32(int32(n)),
	})
	if err != nil {
		return nil, fmt.Errorf("AssignPrivateIpAddresses %d on %s: %w", n, eniID, err)
	}
	ips := make([]netip.Addr, 0, len(out.AssignedPrivateIpAddresses))
	for _, a := range out.AssignedPrivateIpAddresses {
		ip, err := netip.ParseAddr(aws.ToString(a.PrivateIpAddress))
		if err != nil || !ip.Is4() {
			return nil, fmt.Errorf("AssignPrivateIpAddresses on %s: assigned address %q is not IPv4", eniID, aws.ToString(a.PrivateIpAddress))
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// UnassignIPv4 implements Provider. Nothing to give back is no call.
func (p *provider) UnassignIPv4(ctx context.Context, eniID string, ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	ss := make([]string, len(ips))
	for i, ip := range ips {
		ss[i] = ip.String()
	}
	if _, err := p.api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(eniID),
		PrivateIpAddresses: ss,
	}); err != nil {
		return fmt.Errorf("UnassignPrivateIpAddresses %v from %s: %w", ss, eniID, err)
	}
	return nil
}

// AssignIPv4Prefixes implements Provider.
func (p *provider) AssignIPv4Prefixes(ctx context.Context, eniID string, n int) ([]netip.Prefix, error) {
	if err := checkCount("AssignIPv4Prefixes", eniID, n); err != nil {
		return nil, err
	}
	out, err := p.api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(eniID),
		Ipv4PrefixCount:    aws.Int32(int32(n)),
	})
	if err != nil {
		return nil, fmt.Errorf("AssignPrivateIpAddresses %d /28 prefixes on %s: %w", n, eniID, err)
	}
	pfx := make([]netip.Prefix, 0, len(out.AssignedIpv4Prefixes))
	for _, a := range out.AssignedIpv4Prefixes {
		p, err := netip.ParsePrefix(aws.ToString(a.Ipv4Prefix))
		if err != nil || !p.Addr().Is4() || p.Bits() != 28 {
			return nil, fmt.Errorf("AssignPrivateIpAddresses on %s: assigned prefix %q is not an IPv4 /28", eniID, aws.ToString(a.Ipv4Prefix))
		}
		pfx = append(pfx, p)
	}
	return pfx, nil
}

// UnassignIPv4Prefixes implements Provider. Nothing to give back is no
// call.
func (p *provider) UnassignIPv4Prefixes(ctx context.Context, eniID string, pfx []netip.Prefix) error {
	if len(pfx) == 0 {
		return nil
	}
	ss := make([]string, len(pfx))
	for i, p := range pfx {
		ss[i] = p.String()
	}
	if _, err := p.api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(eniID),
		Ipv4Prefixes:       ss,
	}); err != nil {
		return fmt.Errorf("UnassignPrivateIpAddresses prefixes %v from %s: %w", ss, eniID, err)
	}
	return nil
}
