package cloud

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// Tags AllocENI puts on the ENIs it creates: the instance's ID lets a
// cleanup job find ENIs leaked by a terminated node, the second marks
// them as vpccni's to free.
const (
	TagInstanceID   = "node.k8s.amazonaws.com/instance_id"
	TagManaged      = "vpccni/managed"
	TagManagedValue = "true"
)

// TagClusterName carries CLUSTER_NAME on the ENIs AllocENI creates, as in
// the reference.
const TagClusterName = "cluster.k8s.amazonaws.com/name"

// TagCreatedAt carries when AllocENI created the ENI (RFC 3339, UTC), so
// a sweep can tell an ENI leaked long ago from one another node is still
// between creating and attaching.
const TagCreatedAt = "vpccni/created-at"

// ProviderOptions tune NewProvider. The zero value is what a node uses.
type ProviderOptions struct {
	// ENITags are put on every ENI AllocENI creates besides its own
	// (ADDITIONAL_ENI_TAGS, and CLUSTER_NAME as TagClusterName). A key of
	// AllocENI's own never replaces it: TagInstanceID is refused by
	// NewProvider's caller (its domain is reserved), and the vpccni/ keys
	// given here are left out.
	ENITags map[string]string
	// Sleep waits between DeleteNetworkInterface attempts. Nil is a real
	// timer that returns ctx's error if ctx ends first; tests pass one that
	// returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// DeleteAttempts is how often FreeENI tries DeleteNetworkInterface
	// while EC2 still reports the ENI in use (detaching is asynchronous).
	// Zero means 5.
	DeleteAttempts int
	// DeleteRetryDelay is the first wait between attempts; it doubles each
	// time. Zero means 1s, so 5 attempts span 15s.
	DeleteRetryDelay time.Duration
	// Failpoints arms AllocENI's failpoints (FailAllocBeforeAttach,
	// FailAllocBeforeDeleteOnTermination); nil arms none.
	Failpoints *failpoint.Set
	// Now is the clock stamped on created ENIs (TagCreatedAt) and read by
	// DeleteLeakedENIs to age them. Nil means time.Now; a simulation
	// passes its own clock so that ages follow simulated time.
	Now func() time.Time
}

const (
	defaultDeleteAttempts   = 5
	defaultDeleteRetryDelay = time.Second
)

// NewProvider returns the Provider of the instance it runs on: it learns
// the instance from md and changes it through api.
func NewProvider(api EC2, md Metadata, opt ProviderOptions) Provider {
	if opt.Sleep == nil {
		opt.Sleep = sleep
	}
	if opt.DeleteAttempts <= 0 {
		opt.DeleteAttempts = defaultDeleteAttempts
	}
	if opt.DeleteRetryDelay <= 0 {
		opt.DeleteRetryDelay = defaultDeleteRetryDelay
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &provider{api: api, md: metadataReader{md}, opt: opt}
}

// sleep waits d or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type provider struct {
	api EC2
	md  metadataReader
	opt ProviderOptions

	mu sync.Mutex
	id *identity // nil until read successfully once
}

// identity is what never changes while the instance runs, read once.
type identity struct {
	instanceID   string
	instanceType string
	primaryMAC   string
	limits       Limits
}

// identity returns the instance's identity, reading it on first use. A
// failed read is not cached, so the next call tries again.
func (p *provider) identity(ctx context.Context) (identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id != nil {
		return *p.id, nil
	}
	var id identity
	var err error
	if id.instanceID, err = p.md.text(ctx, "instance-id"); err != nil {
		return id, err
	}
	if id.instanceType, err = p.md.text(ctx, "instance-type"); err != nil {
		return id, err
	}
	if id.primaryMAC, err = p.md.text(ctx, "mac"); err != nil {
		return id, err
	}
	var known bool
	if id.limits, known = LimitsOf(id.instanceType); !known {
		if id.limits, err = limitsFromEC2(ctx, p.api, id.instanceType); err != nil {
			return id, err
		}
	}
	p.id = &id
	return id, nil
}

// describeAttached returns the ENIs EC2 has attached to the instance,
// following NextToken.
func (p *provider) describeAttached(ctx context.Context, instanceID string) ([]types.NetworkInterface, error) {
	in := &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{instanceID}}},
	}
	var all []types.NetworkInterface
	for {
		out, err := p.api.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("DescribeNetworkInterfaces attached to %s: %w", instanceID, err)
		}
		all = append(all, out.NetworkInterfaces...)
		if aws.ToString(out.NextToken) == "" {
			return all, nil
		}
		in.NextToken = out.NextToken
	}
}

// describeENI returns one ENI as EC2 sees it.
func (p *provider) describeENI(ctx context.Context, eniID string) (types.NetworkInterface, error) {
	out, err := p.api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eniID}})
	if err != nil {
		return types.NetworkInterface{}, fmt.Errorf("DescribeNetworkInterfaces %s: %w", eniID, err)
	}
	for _, ni := range out.NetworkInterfaces {
		if aws.ToString(ni.NetworkInterfaceId) == eniID {
			return ni, nil
		}
	}
	return types.NetworkInterface{}, fmt.Errorf("DescribeNetworkInterfaces %s: ENI missing from the answer", eniID)
}
