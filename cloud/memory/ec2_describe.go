package memory

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

// eniFilterValue returns an ENI's value for a DescribeNetworkInterfaces
// filter name, and whether the model knows that filter.
func (v *vpc) eniFilterValue(e *eni, name string) (string, bool) {
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		return e.tags[k], true
	}
	switch name {
	case "network-interface-id":
		return e.id, true
	case "subnet-id":
		return e.subnetID, true
	case "vpc-id":
		return v.id, true
	case "mac-address":
		return e.mac, true
	case "interface-type":
		if e.trunk {
			return string(types.NetworkInterfaceTypeTrunk), true
		}
		return string(types.NetworkInterfaceTypeInterface), true
	case "status":
		if e.att != nil {
			return string(types.NetworkInterfaceStatusInUse), true
		}
		return string(types.NetworkInterfaceStatusAvailable), true
	case "attachment.instance-id":
		if e.att != nil {
			return e.att.inst.instanceID, true
		}
		return "", true
	case "attachment.status":
		if e.att != nil {
			return string(types.AttachmentStatusAttached), true
		}
		return "", true
	case "attachment.device-index":
		if e.att != nil {
			return strconv.Itoa(e.att.device), true
		}
		return "", true
	}
	return "", false
}

// DescribeNetworkInterfaces lists the VPC's ENIs, as EC2 lists the
// account's, by ID and filters (values of one filter are alternatives,
// filters must all match; tag-key matches a tag by key). Every answer
// fits one page.
func (c *Cloud) DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, _ ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error) {
	const api = "DescribeNetworkInterfaces"
	return call(ctx, c, api, func() (*ec2.DescribeNetworkInterfacesOutput, error) {
		v := c.vpc
		for _, f := range in.Filters {
			if name := aws.ToString(f.Name); name != "tag-key" {
				if _, known := v.eniFilterValue(&eni{}, name); !known {
					return nil, apiError(api, codeInvalidParameter, "The filter '%s' is invalid", name)
				}
			}
		}
		candidates, err := c.describeCandidates(api, in)
		if err != nil {
			return nil, err
		}
		out := &ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: []types.NetworkInterface{}}
	next:
		for _, e := range candidates {
			for _, f := range in.Filters {
				name := aws.ToString(f.Name)
				if name == "tag-key" {
					if !slices.ContainsFunc(f.Values, func(k string) bool { _, ok := e.tags[k]; return ok }) {
						continue next
					}
					continue
				}
				if val, _ := v.eniFilterValue(e, name); !slices.Contains(f.Values, val) {
					continue next
				}
			}
			out.NetworkInterfaces = append(out.NetworkInterfaces, v.describe(e))
		}
		return out, nil
	})
}

// describeCandidates returns, sorted by ID, the ENIs a describe has to
// look at: the named ones; else, when it filters on
// attachment.instance-id (as ipamd's describes do), only those
// instances' attached ENIs, so a node's describe costs its own ENIs, not
// the whole fleet's; else, when it filters on status available alone (as
// the leak sweep every node runs does), only the available ENIs; else
// all. The caller holds c.vpc.mu.
func (c *Cloud) describeCandidates(api string, in *ec2.DescribeNetworkInterfacesInput) ([]*eni, error) {
	v := c.vpc
	if len(in.NetworkInterfaceIds) > 0 {
		named := make(map[string]*eni, len(in.NetworkInterfaceIds))
		for _, id := range in.NetworkInterfaceIds {
			e, ok := v.enis[id]
			if !ok {
				return nil, apiError(api, cloud.CodeENINotFound, "The networkInterface ID '%s' does not exist", id)
			}
			named[id] = e
		}
		return sortedByID(named), nil
	}
	for _, f := range in.Filters {
		if aws.ToString(f.Name) != "attachment.instance-id" {
			continue
		}
		attached := map[string]*eni{}
		for _, id := range f.Values {
			if inst, ok := v.instances[id]; ok {
				maps.Copy(attached, inst.attached)
			}
		}
		return sortedByID(attached), nil
	}
	for _, f := range in.Filters {
		if aws.ToString(f.Name) == "status" && len(f.Values) == 1 && f.Values[0] == string(types.NetworkInterfaceStatusAvailable) {
			return sortedByID(v.available), nil
		}
	}
	return sortedByID(v.enis), nil
}

// DescribeInstances describes the named running instances of the VPC,
// or this one when none is named (filters are not modelled: asking by
// ID, or for all, is what ipamd does).
func (c *Cloud) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	const api = "DescribeInstances"
	return call(ctx, c, api, func() (*ec2.DescribeInstancesOutput, error) {
		if len(in.Filters) > 0 {
			return nil, apiError(api, codeUnsupported, "the memory cloud does not model DescribeInstances filters")
		}
		insts := []*Cloud{c}
		if len(in.InstanceIds) > 0 {
			insts = nil
		}
		for _, id := range in.InstanceIds {
			inst, ok := c.vpc.instances[id]
			if !ok {
				return nil, apiError(api, codeInstanceNotFound, "The instance ID '%s' does not exist", id)
			}
			if !slices.Contains(insts, inst) {
				insts = append(insts, inst)
			}
		}
		res := types.Reservation{}
		for _, inst := range insts {
			res.Instances = append(res.Instances, inst.describeInstance())
		}
		return &ec2.DescribeInstancesOutput{Reservations: []types.Reservation{res}}, nil
	})
}

// describeInstance is the instance as DescribeInstances returns it. The
// caller holds c.vpc.mu.
func (c *Cloud) describeInstance() types.Instance {
	inst := types.Instance{
		InstanceId:   aws.String(c.instanceID),
		InstanceType: types.InstanceType(c.typ),
		VpcId:        aws.String(c.vpc.id),
		Placement:    &types.Placement{AvailabilityZone: aws.String(c.vpc.region + "a")},
	}
	for _, e := range sortedByID(c.attached) {
		ni := c.vpc.describe(e)
		ini := types.InstanceNetworkInterface{
			NetworkInterfaceId: ni.NetworkInterfaceId, MacAddress: ni.MacAddress, SubnetId: ni.SubnetId,
			VpcId: ni.VpcId, PrivateIpAddress: ni.PrivateIpAddress, Status: ni.Status, Groups: ni.Groups,
			InterfaceType: aws.String(string(ni.InterfaceType)),
			Attachment: &types.InstanceNetworkInterfaceAttachment{
				AttachmentId: ni.Attachment.AttachmentId, DeviceIndex: ni.Attachment.DeviceIndex,
				DeleteOnTermination: ni.Attachment.DeleteOnTermination, NetworkCardIndex: ni.Attachment.NetworkCardIndex,
				Status: ni.Attachment.Status,
			},
		}
		for _, a := range ni.PrivateIpAddresses {
			ini.PrivateIpAddresses = append(ini.PrivateIpAddresses, types.InstancePrivateIpAddress{PrivateIpAddress: a.PrivateIpAddress, Primary: a.Primary})
		}
		for _, p := range ni.Ipv4Prefixes {
			ini.Ipv4Prefixes = append(ini.Ipv4Prefixes, types.InstanceIpv4Prefix{Ipv4Prefix: p.Ipv4Prefix})
		}
		for _, p := range ni.Ipv6Prefixes {
			ini.Ipv6Prefixes = append(ini.Ipv6Prefixes, types.InstanceIpv6Prefix{Ipv6Prefix: p.Ipv6Prefix})
		}
		if e.att.device == 0 {
			inst.SubnetId, inst.PrivateIpAddress, inst.SecurityGroups = ni.SubnetId, ni.PrivateIpAddress, ni.Groups
		}
		inst.NetworkInterfaces = append(inst.NetworkInterfaces, ini)
	}
	slices.SortFunc(inst.NetworkInterfaces, func(a, b types.InstanceNetworkInterface) int {
		return int(*a.Attachment.DeviceIndex - *b.Attachment.DeviceIndex)
	})
	return inst
}

// DescribeInstanceTypes answers from cloud's limits table; no types named
// means all of them.
func (c *Cloud) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	const api = "DescribeInstanceTypes"
	return call(ctx, c, api, func() (*ec2.DescribeInstanceTypesOutput, error) {
		names := make([]string, 0, len(in.InstanceTypes))
		for _, t := range in.InstanceTypes {
			names = append(names, string(t))
		}
		if len(names) == 0 {
			names = cloud.KnownTypes()
		}
		out := &ec2.DescribeInstanceTypesOutput{}
		for _, n := range names {
			l, ok := cloud.LimitsOf(n)
			if !ok {
				return nil, apiError(api, codeInvalidParameter, "The following supplied instance types do not exist: [%s]", n)
			}
			out.InstanceTypes = append(out.InstanceTypes, types.InstanceTypeInfo{
				InstanceType: types.InstanceType(n),
				NetworkInfo: &types.NetworkInfo{
					MaximumNetworkInterfaces:  aws.Int32(int32(l.ENIs)),
					Ipv4AddressesPerInterface: aws.Int32(int32(l.IPv4PerENI)),
					Ipv6Supported:             aws.Bool(l.IPv6),
					MaximumNetworkCards:       aws.Int32(1),
				},
			})
		}
		return out, nil
	})
}

// DescribeSubnets lists subnets by ID and by the subnet-id, vpc-id and
// cidr-block filters, with their free-address count.
func (c *Cloud) DescribeSubnets(ctx context.Context, in *ec2.DescribeSubnetsInput, _ ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error) {
	const api = "DescribeSubnets"
	return call(ctx, c, api, func() (*ec2.DescribeSubnetsOutput, error) {
		v := c.vpc
		for _, id := range in.SubnetIds {
			if _, ok := v.subnets[id]; !ok {
				return nil, apiError(api, codeSubnetNotFound, "The subnet ID '%s' does not exist", id)
			}
		}
		ids := slices.Sorted(maps.Keys(v.subnets))
		out := &ec2.DescribeSubnetsOutput{Subnets: []types.Subnet{}}
	next:
		for _, id := range ids {
			s := v.subnets[id]
			if len(in.SubnetIds) > 0 && !slices.Contains(in.SubnetIds, id) {
				continue
			}
			for _, f := range in.Filters {
				var val string
				switch name := aws.ToString(f.Name); name {
				case "subnet-id":
					val = s.id
				case "vpc-id":
					val = v.id
				case "cidr-block":
					val = s.cidr.String()
				default:
					return nil, apiError(api, codeInvalidParameter, "The filter '%s' is invalid", name)
				}
				if !slices.Contains(f.Values, val) {
					continue next
				}
			}
			out.Subnets = append(out.Subnets, types.Subnet{
				SubnetId:                aws.String(s.id),
				VpcId:                   aws.String(v.id),
				CidrBlock:               aws.String(s.cidr.String()),
				AvailabilityZone:        aws.String(v.region + "a"),
				AvailableIpAddressCount: aws.Int32(int32(s.available())),
				State:                   types.SubnetStateAvailable,
				Ipv6CidrBlockAssociationSet: []types.SubnetIpv6CidrBlockAssociation{{
					Ipv6CidrBlock: aws.String(s.ipv6.String()),
				}},
			})
		}
		return out, nil
	})
}

// CreateTags tags ENIs, all or nothing. Tagging other resources is not
// modelled.
func (c *Cloud) CreateTags(ctx context.Context, in *ec2.CreateTagsInput, _ ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error) {
	const api = "CreateTags"
	return call(ctx, c, api, func() (*ec2.CreateTagsOutput, error) {
		if len(in.Resources) == 0 || len(in.Tags) == 0 {
			return nil, apiError(api, codeMissingParameter, "The request must contain Resources and Tags")
		}
		var enis []*eni
		for _, r := range in.Resources {
			if !strings.HasPrefix(r, "eni-") {
				return nil, apiError(api, codeUnsupported, "the memory cloud tags ENIs only, not %s", r)
			}
			e, err := c.lookupENI(api, aws.String(r))
			if err != nil {
				return nil, err
			}
			enis = append(enis, e)
		}
		for _, e := range enis {
			for _, t := range in.Tags {
				e.tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
		}
		return &ec2.CreateTagsOutput{}, nil
	})
}
