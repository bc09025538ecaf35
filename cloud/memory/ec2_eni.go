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

// lookupENI returns the ENI or EC2's not-found error. The caller holds c.mu.
func (c *Cloud) lookupENI(api string, id *string) (*eni, error) {
	if id == nil {
		return nil, apiError(api, codeMissingParameter, "The request must contain the parameter NetworkInterfaceId")
	}
	e, ok := c.enis[*id]
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
		s, ok := c.subnets[*in.SubnetId]
		if !ok {
			return nil, apiError(api, codeSubnetNotFound, "The subnet ID '%s' does not exist", *in.SubnetId)
		}
		groups := in.Groups
		if len(groups) == 0 {
			groups = []string{c.sg} // EC2 uses the VPC's default group
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
		ip, ok := s.takeAddrs(1)
		if !ok {
			return nil, apiError(api, cloud.CodeInsufficientFreeAddresses, "Insufficient free IP addresses in subnet %s", s.id)
		}
		c.created++
		n := c.created
		e := &eni{
			id:          "eni-" + hexID(fmt.Sprintf("%s/created/%d", c.typ, n)),
			mac:         fmt.Sprintf("02:00:00:01:%02x:%02x", byte(n>>8), byte(n)),
			subnetID:    s.id,
			description: aws.ToString(in.Description),
			trunk:       in.InterfaceType == types.NetworkInterfaceCreationTypeTrunk,
			primary:     ip[0],
			groups:      slices.Clone(groups),
			tags:        tags,
		}
		c.enis[e.id] = e
		ni := c.describe(e)
		return &ec2.CreateNetworkInterfaceOutput{NetworkInterface: &ni}, nil
	})
}

// checkGroups refuses security groups other than the node's, the only one
// the model's VPC has. The caller holds c.mu.
func (c *Cloud) checkGroups(api string, groups []string) error {
	for _, g := range groups {
		if g != c.sg {
			return apiError(api, codeGroupNotFound, "The security group '%s' does not exist in VPC '%s'", g, vpcID)
		}
	}
	return nil
}

// AttachNetworkInterface attaches an ENI at a device number, after the
// attach delay (SetAttachDelay). OnAttach runs once it has committed.
func (c *Cloud) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	const api = "AttachNetworkInterface"
	c.mu.Lock()
	delay := c.attachDelay
	c.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done(): // call() logs and returns the context's error
		}
		t.Stop()
	}
	var attached cloud.ENI
	out, err := call(ctx, c, api, func() (*ec2.AttachNetworkInterfaceOutput, error) {
		e, err := c.lookupENI(api, in.NetworkInterfaceId)
		if err != nil {
			return nil, err
		}
		if id := aws.ToString(in.InstanceId); id != c.instanceID {
			return nil, apiError(api, codeInstanceNotFound, "The instance ID '%s' does not exist", id)
		}
		if in.DeviceIndex == nil {
			return nil, apiError(api, codeMissingParameter, "The request must contain the parameter DeviceIndex")
		}
		if e.att != nil {
			return nil, apiError(api, cloud.CodeENIInUse, "Interface: [%s] in use", e.id)
		}
		device := int(*in.DeviceIndex)
		if device < 0 || device >= c.limits.ENIs {
			return nil, apiError(api, codeInvalidParameter, "Device index %d is out of range for %s (0 to %d)", device, c.typ, c.limits.ENIs-1)
		}
		count, taken := 0, false
		for _, o := range c.enis {
			if o.att != nil {
				count++
				taken = taken || o.att.device == device
			}
		}
		if count >= c.limits.ENIs {
			return nil, apiError(api, cloud.CodeAttachmentLimitExceeded, "Interface count %d exceeds the limit for %s", count+1, c.typ)
		}
		if taken {
			return nil, apiError(api, codeInvalidParameter, "Instance '%s' already has an interface attached at device index '%d'", c.instanceID, device)
		}
		e.att = c.newAttachment(device, false)
		attached = e.cloudENI(c.subnets[e.subnetID])
		return &ec2.AttachNetworkInterfaceOutput{AttachmentId: aws.String(e.att.id), NetworkCardIndex: aws.Int32(0)}, nil
	})
	if err == nil && c.opt.OnAttach != nil {
		c.opt.OnAttach(attached)
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
// that). OnDetach runs once it has committed.
func (c *Cloud) DetachNetworkInterface(ctx context.Context, in *ec2.DetachNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.DetachNetworkInterfaceOutput, error) {
	const api = "DetachNetworkInterface"
	var detached cloud.ENI
	out, err := call(ctx, c, api, func() (*ec2.DetachNetworkInterfaceOutput, error) {
		id := aws.ToString(in.AttachmentId)
		for _, e := range c.enis {
			if e.att == nil || e.att.id != id {
				continue
			}
			if e.att.device == 0 {
				return nil, apiError(api, codeOperationNotPermitted, "The network interface at device index 0 cannot be detached")
			}
			detached = e.cloudENI(c.subnets[e.subnetID])
			e.att = nil
			return &ec2.DetachNetworkInterfaceOutput{}, nil
		}
		return nil, apiError(api, codeAttachmentNotFound, "The attachment ID '%s' does not exist", id)
	})
	if err == nil && c.opt.OnDetach != nil {
		c.opt.OnDetach(detached)
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
		s := c.subnets[e.subnetID]
		s.release(e.primary)
		s.release(e.secondary...)
		for _, p := range e.prefixes {
			s.markPrefix(p, false)
		}
		for _, p := range e.v6prefixes {
			delete(s.usedV6, p)
		}
		delete(c.enis, e.id)
		return &ec2.DeleteNetworkInterfaceOutput{}, nil
	})
}
