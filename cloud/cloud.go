// Package cloud is ipamd's seam to AWS.
//
// Two layers:
//
//   - EC2 and Metadata are the exact method sets of aws-sdk-go-v2's
//     *ec2.Client and *imds.Client that ipamd calls, so the real clients
//     satisfy them unchanged (cloud/aws builds them), the in-memory EC2
//     (cloud/memory) implements them, and gomock mocks them (mocks/).
//   - Provider is what ipamd asks in its own terms (describe the instance,
//     attach an ENI, assign addresses); NewProvider implements it on any
//     EC2 and Metadata, so the in-memory cloud exercises the same request
//     building and response parsing as a real instance.
package cloud

import (
	"context"
	"net/netip"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// EC2 is the subset of *ec2.Client ipamd uses (docs/reference-facts.md#ec2-calls).
type EC2 interface {
	CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error)
	AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error)
	ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, opts ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error)
	DetachNetworkInterface(ctx context.Context, in *ec2.DetachNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.DetachNetworkInterfaceOutput, error)
	DeleteNetworkInterface(ctx context.Context, in *ec2.DeleteNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error)
	DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, opts ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, opts ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error)
	UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, opts ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error)
	AssignIpv6Addresses(ctx context.Context, in *ec2.AssignIpv6AddressesInput, opts ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error)
	UnassignIpv6Addresses(ctx context.Context, in *ec2.UnassignIpv6AddressesInput, opts ...func(*ec2.Options)) (*ec2.UnassignIpv6AddressesOutput, error)
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeSubnets(ctx context.Context, in *ec2.DescribeSubnetsInput, opts ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// Metadata is the subset of *imds.Client ipamd uses.
type Metadata interface {
	GetMetadata(ctx context.Context, in *imds.GetMetadataInput, opts ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
	GetRegion(ctx context.Context, in *imds.GetRegionInput, opts ...func(*imds.Options)) (*imds.GetRegionOutput, error)
}

// Limits are an instance type's network limits.
type Limits struct {
	ENIs       int  // network interfaces the instance can attach
	IPv4PerENI int  // IPv4 addresses per interface, the primary one included
	IPv6       bool // the type supports IPv6
	Trunk      bool // the type supports a trunk ENI (security groups for pods)
}

// ENI is a network interface attached to the instance and the addresses
// EC2 has assigned to it.
type ENI struct {
	ID           string // eni-…
	MAC          string // as the instance sees it, aa:bb:cc:dd:ee:ff
	DeviceNumber int    // 0 is the primary ENI; it decides the route table
	PrimaryIP    netip.Addr
	SubnetID     string       // subnet-…
	Subnet       netip.Prefix // the ENI's subnet (IPv4)
	Gateway      netip.Addr   // the subnet's router, the first address after the base
	// IPv4 are the secondary addresses, the ones usable by pods (the
	// primary address belongs to the ENI itself).
	IPv4 []netip.Addr
	// IPv4Prefixes are /28 prefixes delegated to the ENI (prefix
	// delegation: 16 pod addresses each).
	IPv4Prefixes []netip.Prefix
	// IPv6Prefixes are prefixes delegated to the ENI (IPv6 mode hands out
	// pod addresses from the primary ENI's prefix).
	IPv6Prefixes []netip.Prefix
	// Trunk marks the trunk ENI of security groups for pods: it carries
	// the branch ENIs' VLANs and has no pod addresses of its own, so the
	// datastore never hands out anything from it.
	Trunk bool
}

// Instance is the node's EC2 instance with its attached ENIs, ordered by
// device number.
type Instance struct {
	ID     string // i-…
	Type   string // e.g. m5.large
	Limits Limits
	// SubnetID and SecurityGroups are the primary ENI's: new ENIs are
	// created with them.
	SubnetID       string
	SecurityGroups []string
	// VPCCIDRs are the VPC's IPv4 CIDR blocks (IMDS vpc-ipv4-cidr-blocks
	// of the primary ENI): traffic to them is not SNATed.
	VPCCIDRs []netip.Prefix
	ENIs     []ENI
}

// Trunk returns the instance's trunk ENI, if one is attached. EC2 attaches
// at most one per instance.
func (i Instance) Trunk() (ENI, bool) {
	for _, e := range i.ENIs {
		if e.Trunk {
			return e, true
		}
	}
	return ENI{}, false
}

// Inventory tells ipamd what the instance has. Implementations return a
// copy the caller may keep and modify.
type Inventory interface {
	Instance(ctx context.Context) (Instance, error)
}

// Provider is what ipamd asks of the cloud. Errors from EC2 keep their
// smithy API error inside (errors.As), so IsThrottled and IsSubnetFull
// classify them.
type Provider interface {
	Inventory
	// AllocENI creates an ENI in the primary ENI's subnet with its
	// security groups, tags it as vpccni's, attaches it at the lowest
	// free device number, sets DeleteOnTermination, and returns it as
	// attached (no secondary addresses yet). If attaching fails the
	// created ENI is deleted again.
	AllocENI(ctx context.Context) (ENI, error)
	// FreeENI detaches and deletes an ENI this instance attached.
	FreeENI(ctx context.Context, eniID string) error
	// AssignIPv4 asks EC2 for n more secondary addresses on the ENI and
	// returns those it got.
	AssignIPv4(ctx context.Context, eniID string, n int) ([]netip.Addr, error)
	// UnassignIPv4 gives secondary addresses back.
	UnassignIPv4(ctx context.Context, eniID string, ips []netip.Addr) error
	// AssignIPv4Prefixes asks for n /28 prefixes (prefix delegation).
	AssignIPv4Prefixes(ctx context.Context, eniID string, n int) ([]netip.Prefix, error)
	// UnassignIPv4Prefixes gives /28 prefixes back.
	UnassignIPv4Prefixes(ctx context.Context, eniID string, pfx []netip.Prefix) error
}
