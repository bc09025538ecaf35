package memory

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

// eni is one network interface of the model.
type eni struct {
	id, mac, subnetID, description string
	trunk                          bool
	primary                        netip.Addr
	secondary                      []netip.Addr   // sorted
	prefixes                       []netip.Prefix // /28s, sorted
	v6prefixes                     []netip.Prefix // /80s, sorted
	groups                         []string
	tags                           map[string]string
	att                            *attachment // nil when not attached
}

type attachment struct {
	id                  string
	inst                *Cloud // the instance it is attached to
	device              int
	deleteOnTermination bool
}

// ipv4Slots is how much of the type's IPv4PerENI the ENI uses: its primary
// address, each secondary and each /28 count one.
func (e *eni) ipv4Slots() int { return 1 + len(e.secondary) + len(e.prefixes) }

// cloudENI is the ENI as cloud describes it (for the hooks).
func (e *eni) cloudENI(s *subnet) cloud.ENI {
	out := cloud.ENI{
		ID: e.id, MAC: e.mac, PrimaryIP: e.primary, SubnetID: e.subnetID,
		Subnet: s.cidr, Gateway: s.at(1),
		IPv4:         slices.Clone(e.secondary),
		IPv4Prefixes: slices.Clone(e.prefixes),
		IPv6Prefixes: slices.Clone(e.v6prefixes),
		Trunk:        e.trunk,
	}
	if e.att != nil {
		out.DeviceNumber = e.att.device
	}
	return out
}

// describe is the ENI as DescribeNetworkInterfaces returns it.
func (v *vpc) describe(e *eni) types.NetworkInterface {
	ni := types.NetworkInterface{
		NetworkInterfaceId: aws.String(e.id),
		MacAddress:         aws.String(e.mac),
		SubnetId:           aws.String(e.subnetID),
		VpcId:              aws.String(v.id),
		AvailabilityZone:   aws.String(v.region + "a"),
		Description:        aws.String(e.description),
		PrivateIpAddress:   aws.String(e.primary.String()),
		InterfaceType:      types.NetworkInterfaceTypeInterface,
		Status:             types.NetworkInterfaceStatusAvailable,
		PrivateIpAddresses: []types.NetworkInterfacePrivateIpAddress{{PrivateIpAddress: aws.String(e.primary.String()), Primary: aws.Bool(true)}},
	}
	if e.trunk {
		ni.InterfaceType = types.NetworkInterfaceTypeTrunk
	}
	for _, a := range e.secondary {
		ni.PrivateIpAddresses = append(ni.PrivateIpAddresses, types.NetworkInterfacePrivateIpAddress{PrivateIpAddress: aws.String(a.String()), Primary: aws.Bool(false)})
	}
	for _, p := range e.prefixes {
		ni.Ipv4Prefixes = append(ni.Ipv4Prefixes, types.Ipv4PrefixSpecification{Ipv4Prefix: aws.String(p.String())})
	}
	for _, p := range e.v6prefixes {
		ni.Ipv6Prefixes = append(ni.Ipv6Prefixes, types.Ipv6PrefixSpecification{Ipv6Prefix: aws.String(p.String())})
	}
	for _, g := range e.groups {
		ni.Groups = append(ni.Groups, types.GroupIdentifier{GroupId: aws.String(g)})
	}
	for _, k := range slices.Sorted(maps.Keys(e.tags)) {
		ni.TagSet = append(ni.TagSet, types.Tag{Key: aws.String(k), Value: aws.String(e.tags[k])})
	}
	if e.att != nil {
		ni.Status = types.NetworkInterfaceStatusInUse
		ni.Attachment = &types.NetworkInterfaceAttachment{
			AttachmentId:        aws.String(e.att.id),
			DeviceIndex:         aws.Int32(int32(e.att.device)),
			InstanceId:          aws.String(e.att.inst.instanceID),
			NetworkCardIndex:    aws.Int32(0),
			DeleteOnTermination: aws.Bool(e.att.deleteOnTermination),
			Status:              types.AttachmentStatusAttached,
		}
	}
	return ni
}
