package cloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// LeakSweeper deletes ENIs vpccni leaked in EC2. (*provider implements it.)
type LeakSweeper interface {
	// DeleteLeakedENIs deletes the available (attached to no instance)
	// ENIs tagged TagManaged, of this cluster if CLUSTER_NAME is set,
	// whose TagCreatedAt is at least minAge old, and returns their IDs,
	// sorted. An ENI without a readable TagCreatedAt is tagged with the
	// current time instead, so a later sweep can age it. The failures of
	// single ENIs are joined into the error; the others are still swept.
	DeleteLeakedENIs(ctx context.Context, minAge time.Duration) ([]string, error)
}

var _ LeakSweeper = (*provider)(nil)

// DeleteLeakedENIs implements LeakSweeper. It runs on any node and may
// see an ENI another node has just created and not yet attached: minAge
// must exceed the time an AllocENI takes between the two calls, which is
// what spares that ENI.
func (p *provider) DeleteLeakedENIs(ctx context.Context, minAge time.Duration) ([]string, error) {
	leaks, err := p.describeLeakCandidates(ctx)
	if err != nil {
		return nil, err
	}
	now := p.opt.Now()
	var deleted []string
	var errs []error
	for _, ni := range leaks {
		id := aws.ToString(ni.NetworkInterfaceId)
		// The filters already say so; checked again so that an answer
		// ignoring a filter can never make us delete an ENI in use or
		// not ours.
		if ni.Status != types.NetworkInterfaceStatusAvailable || tagValue(ni.TagSet, TagManaged) != TagManagedValue {
			continue
		}
		created, err := time.Parse(time.RFC3339, tagValue(ni.TagSet, TagCreatedAt))
		if err != nil {
			// Of unknown age, it may be in the middle of an attach (made
			// by a vpccni that did not stamp it): start its clock now.
			if _, err := p.api.CreateTags(ctx, &ec2.CreateTagsInput{
				Resources: []string{id},
				Tags:      []types.Tag{{Key: aws.String(TagCreatedAt), Value: aws.String(now.UTC().Format(time.RFC3339))}},
			}); err != nil && !IsNotFound(err) {
				errs = append(errs, fmt.Errorf("CreateTags %s %s: %w", id, TagCreatedAt, err))
			}
			continue
		}
		if now.Sub(created) < minAge {
			continue
		}
		_, err = p.api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
		switch {
		case err == nil:
			deleted = append(deleted, id)
		case IsNotFound(err):
			// Another node's sweep deleted it first.
		default:
			errs = append(errs, fmt.Errorf("DeleteNetworkInterface %s (leaked, created %s): %w", id, created.Format(time.RFC3339), err))
		}
	}
	slices.Sort(deleted)
	return deleted, errors.Join(errs...)
}

// describeLeakCandidates lists the available ENIs carrying vpccni's tag
// (and this cluster's name, when one is configured, so that clusters
// sharing a VPC do not sweep each other's), following NextToken.
func (p *provider) describeLeakCandidates(ctx context.Context) ([]types.NetworkInterface, error) {
	filters := []types.Filter{
		{Name: aws.String("status"), Values: []string{string(types.NetworkInterfaceStatusAvailable)}},
		{Name: aws.String("tag:" + TagManaged), Values: []string{TagManagedValue}},
	}
	if name := p.opt.ENITags[TagClusterName]; name != "" {
		filters = append(filters, types.Filter{Name: aws.String("tag:" + TagClusterName), Values: []string{name}})
	}
	in := &ec2.DescribeNetworkInterfacesInput{Filters: filters}
	var all []types.NetworkInterface
	for {
		out, err := p.api.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("DescribeNetworkInterfaces of leaked ENIs: %w", err)
		}
		all = append(all, out.NetworkInterfaces...)
		if aws.ToString(out.NextToken) == "" {
			return all, nil
		}
		in.NextToken = out.NextToken
	}
}

// tagValue returns the value of the tag with the key, "" if none.
func tagValue(tags []types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}
