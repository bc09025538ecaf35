package cloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// cleanupTimeout bounds the calls that undo half of a failed AllocENI.
// They run even when the caller's context has ended (a slow attach that
// timed out is the usual reason to be here), since otherwise the ENI
// leaks in the subnet.
const cleanupTimeout = 30 * time.Second

// AllocENI implements Provider.
func (p *provider) AllocENI(ctx context.Context) (ENI, error) {
	id, err := p.identity(ctx)
	if err != nil {
		return ENI{}, err
	}
	primary, err := p.md.readENI(ctx, id.primaryMAC)
	if err != nil {
		return ENI{}, err
	}
	// EC2, not IMDS, says which device numbers are taken: IMDS lags
	// behind an attach, and two allocations in a row would pick the same
	// number.
	attached, err := p.describeAttached(ctx, id.instanceID)
	if err != nil {
		return ENI{}, err
	}
	device, err := lowestFreeDevice(attached, id.limits.ENIs)
	if err != nil {
		return ENI{}, fmt.Errorf("AllocENI on %s (%s): %w", id.instanceID, id.instanceType, err)
	}

	created, err := p.api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{
		SubnetId:    aws.String(primary.eni.SubnetID),
		Groups:      primary.securityGroups,
		Description: aws.String("vpccni ENI of " + id.instanceID),
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeNetworkInterface,
			Tags:         p.eniTags(id.instanceID),
		}},
	})
	if err != nil {
		return ENI{}, fmt.Errorf("CreateNetworkInterface in %s: %w", primary.eni.SubnetID, err)
	}
	eni, err := eniFromCreated(created.NetworkInterface, device, primary.eni)
	if err != nil {
		return ENI{}, err
	}

	if f := p.opt.Failpoints.Hit(FailAllocBeforeAttach); f != nil {
		if f.Action == failpoint.Crash {
			// The process died here: nothing after this point runs, so
			// the ENI stays in EC2, created, tagged and unattached.
			return ENI{}, f
		}
		return ENI{}, p.undoCreate(ctx, eni.ID, fmt.Errorf("AllocENI %s before attaching: %w", eni.ID, f))
	}
	att, err := p.api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex:        aws.Int32(int32(device)),
		InstanceId:         aws.String(id.instanceID),
		NetworkInterfaceId: aws.String(eni.ID),
	})
	if err != nil {
		return ENI{}, p.undoCreate(ctx, eni.ID, fmt.Errorf("AttachNetworkInterface %s to %s at device %d: %w", eni.ID, id.instanceID, device, err))
	}

	attachmentID := aws.ToString(att.AttachmentId)
	if f := p.opt.Failpoints.Hit(FailAllocBeforeDeleteOnTermination); f != nil {
		if f.Action == failpoint.Crash {
			// As above: the ENI stays attached without
			// DeleteOnTermination, so it outlives the instance.
			return ENI{}, f
		}
		return ENI{}, p.undoAttach(ctx, eni.ID, attachmentID, fmt.Errorf("AllocENI %s before setting DeleteOnTermination: %w", eni.ID, f))
	}
	// Without DeleteOnTermination the ENI would outlive the instance and
	// hold its addresses in the subnet.
	if _, err := p.api.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
		NetworkInterfaceId: aws.String(eni.ID),
		Attachment: &types.NetworkInterfaceAttachmentChanges{
			AttachmentId:        att.AttachmentId,
			DeleteOnTermination: aws.Bool(true),
		},
	}); err != nil {
		return ENI{}, p.undoAttach(ctx, eni.ID, attachmentID, fmt.Errorf("ModifyNetworkInterfaceAttribute %s DeleteOnTermination: %w", eni.ID, err))
	}
	return eni, nil
}

// undoCreate deletes the ENI a failed AllocENI created but did not
// attach, and returns err with the delete's failure, if any, joined.
func (p *provider) undoCreate(ctx context.Context, eniID string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, derr := p.api.DeleteNetworkInterface(cctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(eniID)}); derr != nil {
		return errors.Join(err, fmt.Errorf("DeleteNetworkInterface %s after the failed attach: %w", eniID, derr))
	}
	return err
}

// undoAttach detaches and deletes the ENI a failed AllocENI attached,
// and returns err with that failure, if any, joined.
func (p *provider) undoAttach(ctx context.Context, eniID, attachmentID string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if ferr := p.detachAndDelete(cctx, eniID, attachmentID); ferr != nil {
		return errors.Join(err, fmt.Errorf("freeing %s again: %w", eniID, ferr))
	}
	return err
}

// lowestFreeDevice returns the lowest device number no attached ENI uses,
// below the instance type's ENI limit.
func lowestFreeDevice(attached []types.NetworkInterface, limit int) (int, error) {
	used := make(map[int]bool, len(attached))
	for _, ni := range attached {
		if ni.Attachment != nil && ni.Attachment.DeviceIndex != nil {
			used[int(*ni.Attachment.DeviceIndex)] = true
		}
	}
	for d := range limit {
		if !used[d] {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d taken", ErrNoFreeDevice, limit)
}

// eniFromCreated turns CreateNetworkInterface's answer into the ENI as it
// will be once attached. It lives in the primary ENI's subnet, whose CIDR
// IMDS already told us.
func eniFromCreated(ni *types.NetworkInterface, device int, primary ENI) (ENI, error) {
	if ni == nil || aws.ToString(ni.NetworkInterfaceId) == "" {
		return ENI{}, errors.New("CreateNetworkInterface: the answer has no network interface")
	}
	id := aws.ToString(ni.NetworkInterfaceId)
	ip, err := netip.ParseAddr(aws.ToString(ni.PrivateIpAddress))
	if err != nil {
		return ENI{}, fmt.Errorf("CreateNetworkInterface %s: primary address: %w", id, err)
	}
	if s := aws.ToString(ni.SubnetId); s != primary.SubnetID {
		return ENI{}, fmt.Errorf("CreateNetworkInterface %s: created in subnet %s, asked for %s", id, s, primary.SubnetID)
	}
	return ENI{
		ID:           id,
		MAC:          aws.ToString(ni.MacAddress),
		DeviceNumber: device,
		PrimaryIP:    ip,
		SubnetID:     primary.SubnetID,
		Subnet:       primary.Subnet,
		Gateway:      primary.Gateway,
	}, nil
}

// FreeENI implements Provider. It refuses the primary ENI and ENIs
// attached to another instance: EC2 would let us detach the latter, and
// that is never what ipamd means.
func (p *provider) FreeENI(ctx context.Context, eniID string) error {
	id, err := p.identity(ctx)
	if err != nil {
		return err
	}
	ni, err := p.describeENI(ctx, eniID)
	if err != nil {
		return err
	}
	attachmentID := ""
	if a := ni.Attachment; a != nil && (a.Status == types.AttachmentStatusAttached || a.Status == types.AttachmentStatusAttaching) {
		if owner := aws.ToString(a.InstanceId); owner != id.instanceID {
			return fmt.Errorf("FreeENI %s: attached to %s, not to this instance %s", eniID, owner, id.instanceID)
		}
		if aws.ToInt32(a.DeviceIndex) == 0 {
			return fmt.Errorf("FreeENI %s: it is the primary ENI (device 0)", eniID)
		}
		attachmentID = aws.ToString(a.AttachmentId)
	}
	return p.detachAndDelete(ctx, eniID, attachmentID)
}

// detachAndDelete detaches the ENI (unless attachmentID is empty) and
// deletes it, retrying the delete while EC2 still reports the ENI in use:
// a detach returns before it completes.
func (p *provider) detachAndDelete(ctx context.Context, eniID, attachmentID string) error {
	if attachmentID != "" {
		if _, err := p.api.DetachNetworkInterface(ctx, &ec2.DetachNetworkInterfaceInput{
			AttachmentId: aws.String(attachmentID),
			Force:        aws.Bool(false),
		}); err != nil {
			return fmt.Errorf("DetachNetworkInterface %s (%s): %w", eniID, attachmentID, err)
		}
	}
	delay := p.opt.DeleteRetryDelay
	for attempt := 1; ; attempt++ {
		_, err := p.api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(eniID)})
		switch {
		case err == nil:
			return nil
		case IsNotFound(err) && attachmentID != "":
			// Gone between our detach and our delete: what we wanted.
			return nil
		case !isInUse(err) || attempt == p.opt.DeleteAttempts:
			return fmt.Errorf("DeleteNetworkInterface %s (attempt %d of %d): %w", eniID, attempt, p.opt.DeleteAttempts, err)
		}
		if err := p.opt.Sleep(ctx, delay); err != nil {
			return fmt.Errorf("DeleteNetworkInterface %s: waiting to retry while it detaches: %w", eniID, err)
		}
		delay *= 2
	}
}

// eniTags are the tags of a new ENI: the instance's and vpccni's (the
// creation time among them), then the configured ones in key order.
func (p *provider) eniTags(instanceID string) []types.Tag {
	tags := []types.Tag{
		{Key: aws.String(TagInstanceID), Value: aws.String(instanceID)},
		{Key: aws.String(TagManaged), Value: aws.String(TagManagedValue)},
		{Key: aws.String(TagCreatedAt), Value: aws.String(p.opt.Now().UTC().Format(time.RFC3339))},
	}
	for _, k := range slices.Sorted(maps.Keys(p.opt.ENITags)) {
		if k == TagInstanceID || k == TagManaged || k == TagCreatedAt {
			continue
		}
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(p.opt.ENITags[k])})
	}
	return tags
}
