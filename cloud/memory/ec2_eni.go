package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

// EC2 error codes the model returns besides those cloud classifies.
const (
	codeMissingParameter      = "MissingParameter"
	codeInvalidParameter      = "InvalidParameterValue"
	codeInvalidCombination    = "InvalidParameterCombination"
	codeUnsupported           = "UnsupportedOperation"
	codeOperationNotPermitted = "OperationNotPermitted"
	codeSubnetNotFound        = "InvalidSubnetID.NotFound"
	codeInstanceNotFound      = "InvalidInstanceID.NotFound"
	codeAttachmentNotFound    = "InvalidAttachmentID.NotFound"
	codeGroupNotFound         = "InvalidGroup.NotFound"
	codeAddressInUse          = "PrivateIpAddressInUse"
)

// lookupENI returns the ENI, any of the VPC's as in EC2, or EC2's
// not-found error. The caller holds c.vpc.mu.
func (c *Cloud) lookupENI(api string, id *string) (*eni, error) {
	if id == nil {
		return nil, apiError(api, codeMissingParameter, "The request must contain the parameter NetworkInterfaceId")
	}
	e, ok := c.vpc.enis[*id]
	if !ok {
		return nil, apiError(api, cloud.CodeENINotFound, "The networkInterface ID '%s' does not exist", *id)
	}
	return e, nil
}

// CreateNetworkInterface creates an ENI in the named subnet with the
// subnet's lowest free address. Addresses beyond the primary one are
// assigned afterwards (AssignPrivateIpAddresses), as ipamd does; asking
// for them here is refused as not modelled.
func (c *Cloud) CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error) {
	const api = "CreateNetworkInterface"
	return call(ctx, c, api, func() (*ec2.CreateNetworkInterfaceOutput, error) {
		if in.SecondaryPrivateIpAddressCount != nil || len(in.PrivateIpAddresses) > 0 || in.Ipv4PrefixCount != nil ||
			len(in.Ipv4Prefixes) > 0 || in.Ipv6AddressCount != nil || len(in.Ipv6Addresses) > 0 ||
			in.Ipv6PrefixCount != nil || len(in.Ipv6Prefixes) > 0 || in.PrivateIpAddress != nil {
			return nil, apiError(api, codeUnsupported, "the memory cloud does not model addresses given at creation")
		}
		if in.SubnetId == nil {
			return nil, apiError(api, codeMissingParameter, "The request must contain the parameter SubnetId")
		}
		v := c.vpc
		s, ok := v.subnets[*in.SubnetId]
		if !ok {
			return nil, apiError(api, codeSubnetNotFound, "The subnet ID '%s' does not exist", *in.SubnetId)
		}
		groups := in.Groups
		if len(groups) == 0 {
			groups = []string{v.sg} // EC2 uses the VPC's default group
		}
		if err := c.checkGroups(api, groups); err != nil {
			return nil, err
		}
		tags := map[string]string{}
		for _, ts := range in.TagSpecifications {
			if ts.ResourceType != types.ResourceTypeNetworkInterface {
				return nil, apiError(api, codeInvalidParameter, "tag specification resource type %q is not network-interface", ts.ResourceType)
			}
			for _, t := range ts.Tags {
				tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
		}
		e := &eni{
			subnetID:    s.id,
			description: aws.ToString(in.Description),
			trunk:       in.InterfaceType == types.NetworkInterfaceCreationTypeTrunk,
			groups:      slices.Clone(groups),
			tags:        tags,
		}
		ip, ok := s.takeAddrs(1, e)
		if !ok {
			return nil, apiError(api, cloud.CodeInsufficientFreeAddresses, "Insufficient free IP addresses in subnet %s", s.id)
		}
		v.created++
		n := v.created
		e.primary = ip[0]
		e.id = "eni-" + hexID(fmt.Sprintf("%s/created/%d", v.seed, n))
		// 02:<n>>24>:<n>>16>:01:<n>>8>:<n>: byte 3 is 01 where launch ENIs
		// have 00, so no created ENI shares a launch ENI's MAC; below
		// 65536 it is the 02:00:00:01:hi:lo the model always gave.
		e.mac = fmt.Sprintf("02:%02x:%02x:01:%02x:%02x", byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		v.addENI(e)
		ni := v.describe(e)
		return &ec2.CreateNetworkInterfaceOutput{NetworkInterface: &ni}, nil
	})
}

// checkGroups refuses security groups other than the node's, the only one
// the model's VPC has. The caller holds c.vpc.mu.
func (c *Cloud) checkGroups(api string, groups []string) error {
	for _, g := range groups {
		if g != c.vpc.sg {
			return apiError(api, codeGroupNotFound, "The security group '%s' does not exist in VPC '%s'", g, c.vpc.id)
		}
	}
	return nil
}

// AttachNetworkInterface attaches an ENI at a device number of the named
// running instance of the VPC (its limits and device numbers), after the
// attach delay (SetAttachDelay). That instance's OnAttach runs once it
// has committed.
func (c *Cloud) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	const api = "AttachNetworkInterface"
	c.vpc.mu.Lock()
	delay := c.attachDelay
	c.vpc.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done(): // call() logs and returns the context's error
		}
		t.Stop()
	}
	var attached cloud.ENI
	var hook func(cloud.ENI)
	out, err := call(ctx, c, api, func() (*ec2.AttachNetworkInterfaceOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		inst, ok := c.vpc.instances[aws.ToString(in.InstanceId)]
		if !ok {
			return nil, apiError(api, codeInstanceNotFound, "The instance ID '%s' does not exist", aws.ToString(in.InstanceId))
		}
		if in.DeviceIndex == nil {
			return nil, apiError(api, codeMissingParameter, "The request must contain the parameter DeviceIndex")
		}
		if e.att != nil {
			return nil, apiError(api, cloud.CodeENIInUse, "Interface: [%s] in use", e.id)
		}
		device := int(*in.DeviceIndex)
		if device < 0 || device >= inst.limits.ENIs {
			return nil, apiError(api, codeInvalidParameter, "Device index %d is out of range for %s (0 to %d)", device, inst.typ, inst.limits.ENIs-1)
		}
		if count := len(inst.attached); count >= inst.limits.ENIs {
			return nil, apiError(api, cloud.CodeAttachmentLimitExceeded, "Interface count %d exceeds the limit for %s", count+1, inst.typ)
		}
		if inst.deviceENI(device) != nil {
			return nil, apiError(api, codeInvalidParameter, "Instance '%s' already has an interface attached at device index '%d'", inst.instanceID, device)
		}
		c.vpc.attach(e, inst, device, false)
		attached, hook = e.cloudENI(c.vpc.subnets[e.subnetID]), inst.opt.OnAttach
		return &ec2.AttachNetworkInterfaceOutput{AttachmentId: aws.String(e.att.id), NetworkCardIndex: aws.Int32(0)}, nil
	})
	if err == nil && hook != nil {
		hook(attached)
	}
	return out, err
}

// ModifyNetworkInterfaceAttribute changes DeleteOnTermination of the
// attachment, or the security groups. Other attributes are accepted and
// ignored: nothing in the model depends on them.
func (c *Cloud) ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, _ ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
	const api = "ModifyNetworkInterfaceAttribute"
	return call(ctx, c, api, func() (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if ch := in.Attachment; ch != nil {
			if e.att == nil || aws.ToString(ch.AttachmentId) != e.att.id {
				return nil, apiError(api, codeAttachmentNotFound, "The attachment ID '%s' does not exist", aws.ToString(ch.AttachmentId))
			}
			if ch.DeleteOnTermination != nil {
				e.att.deleteOnTermination = *ch.DeleteOnTermination
			}
		}
		if len(in.Groups) > 0 {
			if err := c.checkGroups(api, in.Groups); err != nil {
				return nil, err
			}
			e.groups = slices.Clone(in.Groups)
		}
		return &ec2.ModifyNetworkInterfaceAttributeOutput{}, nil
	})
}

// DetachNetworkInterface detaches at once (EC2 takes seconds; an injected
// InvalidNetworkInterface.InUse on DeleteNetworkInterface stands for
// that). The ENI keeps its addresses. The OnDetach of the instance it was
// attached to runs once it has committed.
func (c *Cloud) DetachNetworkInterface(ctx context.Context, in *ec2.DetachNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.DetachNetworkInterfaceOutput, error) {
	const api = "DetachNetworkInterface"
	var detached cloud.ENI
	var hook func(cloud.ENI)
	out, err := call(ctx, c, api, func() (*ec2.DetachNetworkInterfaceOutput, error) {
		id := aws.ToString(in.AttachmentId)
		e, ok := c.vpc.attachments[id]
		if !ok {
			return nil, apiError(api, codeAttachmentNotFound, "The attachment ID '%s' does not exist", id)
		}
		if e.att.device == 0 {
			return nil, apiError(api, codeOperationNotPermitted, "The network interface at device index 0 cannot be detached")
		}
		detached, hook = e.cloudENI(c.vpc.subnets[e.subnetID]), e.att.inst.opt.OnDetach
		c.vpc.detach(e)
		return &ec2.DetachNetworkInterfaceOutput{}, nil
	})
	if err == nil && hook != nil {
		hook(detached)
	}
	return out, err
}

// DeleteNetworkInterface deletes a detached ENI and gives its addresses
// back to the subnet.
func (c *Cloud) DeleteNetworkInterface(ctx context.Context, in *ec2.DeleteNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error) {
	const api = "DeleteNetworkInterface"
	return call(ctx, c, api, func() (*ec2.DeleteNetworkInterfaceOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if e.att != nil {
			return nil, apiError(api, cloud.CodeENIInUse, "The network interface '%s' is currently in use", e.id)
		}
		c.vpc.deleteENI(e)
		return &ec2.DeleteNetworkInterfaceOutput{}, nil
	})
}
