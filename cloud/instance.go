package cloud

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Instance reads the instance from IMDS, as the node sees it, then asks
// EC2 which ENI is the trunk. EC2 also has the last word on each ENI's
// addresses: IMDS catches up with an assignment seconds after EC2 made
// it, and handing out an address EC2 has not given us (or no longer
// gives us) would break a pod. Which ENIs are attached stays IMDS's
// answer: an ENI IMDS lists is one the node can see.
func (p *provider) Instance(ctx context.Context) (Instance, error) {
	id, err := p.identity(ctx)
	if err != nil {
		return Instance{}, err
	}
	inst := Instance{ID: id.instanceID, Type: id.instanceType, Limits: id.limits}
	macs, err := p.md.lines(ctx, macsPath)
	if err != nil {
		return Instance{}, err
	}
	primaryFound := false
	for _, mac := range macs {
		mac = strings.TrimSuffix(mac, "/")
		m, err := p.md.readENI(ctx, mac)
		if isMetadataAbsent(err) && mac != id.primaryMAC {
			// Detached between listing the MACs and reading its keys:
			// not attached any more is what IMDS now says.
			continue
		}
		if err != nil {
			return Instance{}, err
		}
		if mac == id.primaryMAC {
			primaryFound = true
			inst.SubnetID, inst.SecurityGroups = m.eni.SubnetID, m.securityGroups
		}
		inst.ENIs = append(inst.ENIs, m.eni)
	}
	if !primaryFound {
		return Instance{}, fmt.Errorf("IMDS %s does not list the primary MAC %s", macsPath, id.primaryMAC)
	}
	if inst.VPCCIDRs, err = p.md.vpcCIDRs(ctx, id.primaryMAC); err != nil {
		return Instance{}, err
	}
	described, err := p.describeAttached(ctx, id.instanceID)
	if err != nil {
		return Instance{}, err
	}
	byID := make(map[string]types.NetworkInterface, len(described))
	for _, ni := range described {
		byID[aws.ToString(ni.NetworkInterfaceId)] = ni
	}
	for i := range inst.ENIs {
		if ni, ok := byID[inst.ENIs[i].ID]; ok {
			if err := applyEC2Addresses(&inst.ENIs[i], ni); err != nil {
				return Instance{}, fmt.Errorf("DescribeNetworkInterfaces %s: %w", inst.ENIs[i].ID, err)
			}
		}
	}
	slices.SortFunc(inst.ENIs, func(a, b ENI) int { return a.DeviceNumber - b.DeviceNumber })
	return inst, nil
}

// applyEC2Addresses overwrites what IMDS said about an ENI's addresses with
// EC2's answer, and marks the trunk.
func applyEC2Addresses(e *ENI, ni types.NetworkInterface) error {
	e.Trunk = ni.InterfaceType == types.NetworkInterfaceTypeTrunk
	var secondary []netip.Addr
	for _, pa := range ni.PrivateIpAddresses {
		a, err := netip.ParseAddr(aws.ToString(pa.PrivateIpAddress))
		if err != nil {
			return fmt.Errorf("private address: %w", err)
		}
		if aws.ToBool(pa.Primary) {
			e.PrimaryIP = a
			continue
		}
		secondary = append(secondary, a)
	}
	e.IPv4 = secondary
	v4 := make([]string, 0, len(ni.Ipv4Prefixes))
	for _, p := range ni.Ipv4Prefixes {
		v4 = append(v4, aws.ToString(p.Ipv4Prefix))
	}
	v6 := make([]string, 0, len(ni.Ipv6Prefixes))
	for _, p := range ni.Ipv6Prefixes {
		v6 = append(v6, aws.ToString(p.Ipv6Prefix))
	}
	var err error
	if e.IPv4Prefixes, err = parsePrefixes(v4); err != nil {
		return fmt.Errorf("IPv4 prefix: %w", err)
	}
	if e.IPv6Prefixes, err = parsePrefixes(v6); err != nil {
		return fmt.Errorf("IPv6 prefix: %w", err)
	}
	return nil
}
