package cloud_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/failpoint"
)

// clock is a settable ProviderOptions.Now shared by a test's nodes.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func sweeper(t *testing.T, c *memory.Cloud) cloud.LeakSweeper {
	t.Helper()
	s, isSweeper := c.Provider().(cloud.LeakSweeper)
	if !isSweeper {
		t.Fatal("the provider is no LeakSweeper")
	}
	return s
}

// leakOne makes c's AllocENI crash at point and returns the ENI it left.
func leakOne(t *testing.T, v *memory.VPC, opt cloud.ProviderOptions, point failpoint.Name) (*memory.Cloud, string) {
	t.Helper()
	c := launchArmed(t, v, point, failpoint.Crash, opt)
	before := availableIDs(v)
	if _, err := c.Provider().AllocENI(context.Background()); !failpoint.Is(err, failpoint.Crash) {
		t.Fatalf("AllocENI: %v, want the crash", err)
	}
	if point == cloud.FailAllocBeforeDeleteOnTermination {
		inst, err := c.Provider().Instance(context.Background())
		if err != nil || len(inst.ENIs) != 2 {
			t.Fatalf("instance %+v %v", inst, err)
		}
		return c, inst.ENIs[1].ID
	}
	for _, id := range availableIDs(v) {
		if !slices.Contains(before, id) {
			return c, id
		}
	}
	t.Fatal("no ENI left behind")
	return nil, ""
}

func availableIDs(v *memory.VPC) []string {
	var ids []string
	for _, e := range v.AvailableENIs() {
		ids = append(ids, e.ID)
	}
	return ids
}

// createRaw creates an available ENI in c's subnet with exactly the tags
// given, as something other than AllocENI would.
func createRaw(t *testing.T, c *memory.Cloud, tags map[string]string) string {
	t.Helper()
	inst, err := c.Provider().Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	in := &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(inst.SubnetID), Groups: inst.SecurityGroups}
	if len(tags) > 0 {
		ts := types.TagSpecification{ResourceType: types.ResourceTypeNetworkInterface}
		for k, v := range tags {
			ts.Tags = append(ts.Tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []types.TagSpecification{ts}
	}
	out, err := c.CreateNetworkInterface(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.NetworkInterface.NetworkInterfaceId)
}

// TestDeleteLeakedENIs: in a VPC of two clusters, a node's sweep deletes
// the old available ENIs its cluster's vpccni left (one never attached,
// one left by a terminated node) and spares the young one, the attached
// one, the unmanaged one, the other cluster's and the one without a
// creation time, which it stamps; a second sweep deletes nothing, and
// once the spared ones are old enough a later sweep takes them.
func TestDeleteLeakedENIs(t *testing.T) {
	ctx := context.Background()
	const minAge = 5 * time.Minute
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	prod := cloud.ProviderOptions{Now: clk.now, ENITags: map[string]string{cloud.TagClusterName: "prod"}}
	dev := cloud.ProviderOptions{Now: clk.now, ENITags: map[string]string{cloud.TagClusterName: "dev"}}
	v := mustNewVPC(t)

	_, neverAttached := leakOne(t, v, prod, cloud.FailAllocBeforeAttach)
	gone, outlived := leakOne(t, v, prod, cloud.FailAllocBeforeDeleteOnTermination)
	if err := v.Terminate(gone.InstanceID()); err != nil {
		t.Fatal(err)
	}
	_, otherCluster := leakOne(t, v, dev, cloud.FailAllocBeforeAttach)

	b, err := v.Launch("m5.large", memory.Options{Provider: prod})
	if err != nil {
		t.Fatal(err)
	}
	attached, err := b.Provider().AllocENI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unmanaged := createRaw(t, b, map[string]string{cloud.TagClusterName: "prod"})
	unstamped := createRaw(t, b, map[string]string{cloud.TagManaged: cloud.TagManagedValue, cloud.TagClusterName: "prod"})

	clk.advance(10 * time.Minute)
	_, young := leakOne(t, v, prod, cloud.FailAllocBeforeAttach)

	s := sweeper(t, b)
	deleted, err := s.DeleteLeakedENIs(ctx, minAge)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{neverAttached, outlived}
	slices.Sort(want)
	if !reflect.DeepEqual(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	spared := []string{otherCluster, unmanaged, unstamped, young}
	slices.Sort(spared)
	if got := availableIDs(v); !reflect.DeepEqual(got, spared) {
		t.Fatalf("available after the sweep %v, want %v", got, spared)
	}
	if inst, err := b.Provider().Instance(ctx); err != nil || len(inst.ENIs) != 2 || inst.ENIs[1].ID != attached.ID {
		t.Fatalf("the attached ENI: %+v %v", inst.ENIs, err)
	}
	_, tags := describeOne(t, b, unstamped)
	if tags[cloud.TagCreatedAt] != "2026-03-01T12:10:00Z" {
		t.Errorf("the unstamped ENI's %s: %q, want the sweep's time", cloud.TagCreatedAt, tags[cloud.TagCreatedAt])
	}
	if _, tags := describeOne(t, b, unmanaged); tags[cloud.TagCreatedAt] != "" {
		t.Errorf("the unmanaged ENI was stamped: %v", tags)
	}

	if again, err := s.DeleteLeakedENIs(ctx, minAge); err != nil || len(again) != 0 {
		t.Fatalf("second sweep deleted %v, %v; want nothing", again, err)
	}

	clk.advance(minAge)
	later, err := s.DeleteLeakedENIs(ctx, minAge)
	want = []string{unstamped, young}
	slices.Sort(want)
	if err != nil || !reflect.DeepEqual(later, want) {
		t.Fatalf("sweep after minAge deleted %v, %v; want %v", later, err, want)
	}
	spared = []string{otherCluster, unmanaged}
	slices.Sort(spared)
	if got := availableIDs(v); !reflect.DeepEqual(got, spared) {
		t.Fatalf("available at the end %v, want %v", got, spared)
	}
}

// TestDeleteLeakedENIsWithoutClusterName: a node without CLUSTER_NAME
// sweeps vpccni's ENIs whatever their cluster.
func TestDeleteLeakedENIsWithoutClusterName(t *testing.T) {
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	v := mustNewVPC(t)
	_, a := leakOne(t, v, cloud.ProviderOptions{Now: clk.now, ENITags: map[string]string{cloud.TagClusterName: "dev"}}, cloud.FailAllocBeforeAttach)
	_, b := leakOne(t, v, cloud.ProviderOptions{Now: clk.now}, cloud.FailAllocBeforeAttach)
	n, err := v.Launch("m5.large", memory.Options{Provider: cloud.ProviderOptions{Now: clk.now}})
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	want := []string{a, b}
	slices.Sort(want)
	if got, err := sweeper(t, n).DeleteLeakedENIs(context.Background(), time.Minute); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("deleted %v, %v; want %v", got, err, want)
	}
}

// TestDeleteLeakedENIsDeleteFailures: a delete another node's sweep won
// (NotFound) is no error; any other failure is returned, and the sweep
// goes on with the next ENI.
func TestDeleteLeakedENIsDeleteFailures(t *testing.T) {
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	opt := cloud.ProviderOptions{Now: clk.now}
	v := mustNewVPC(t)
	var leaks []string
	for range 3 {
		_, id := leakOne(t, v, opt, cloud.FailAllocBeforeAttach)
		leaks = append(leaks, id)
	}
	slices.Sort(leaks)
	n, err := v.Launch("m5.large", memory.Options{Provider: opt})
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	s := sweeper(t, n)

	// The first delete is refused as throttled; the others go through.
	n.InjectFault("DeleteNetworkInterface", memory.Fault{Code: cloud.CodeRequestLimitExceeded, Times: 1})
	got, err := s.DeleteLeakedENIs(context.Background(), time.Minute)
	if !cloud.IsThrottled(err) || !reflect.DeepEqual(got, leaks[1:]) {
		t.Fatalf("deleted %v, %v; want %v and the throttling", got, err, leaks[1:])
	}
	// The one left was deleted by someone else meanwhile, as the model
	// answers: not found.
	n.InjectFault("DeleteNetworkInterface", memory.Fault{Code: cloud.CodeENINotFound, Times: 1})
	if got, err := s.DeleteLeakedENIs(context.Background(), time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("deleted %v, %v; want nothing and no error", got, err)
	}
}

// TestDeleteLeakedENIsRequestsAndChecks: the describe asks for available
// managed ENIs of the cluster; an answer that ignores the filters still
// gets no in-use or unmanaged ENI deleted (the mock fails on any delete).
func TestDeleteLeakedENIsRequestsAndChecks(t *testing.T) {
	api, md := newMocks(t)
	old := "2000-01-01T00:00:00Z"
	api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{
		{Name: aws.String("status"), Values: []string{"available"}},
		{Name: aws.String("tag:vpccni/managed"), Values: []string{"true"}},
		{Name: aws.String("tag:cluster.k8s.amazonaws.com/name"), Values: []string{"prod"}},
	}}).Return(&ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: []types.NetworkInterface{
		{NetworkInterfaceId: aws.String("eni-0inuse"), Status: types.NetworkInterfaceStatusInUse, TagSet: []types.Tag{
			{Key: aws.String(cloud.TagManaged), Value: aws.String("true")}, {Key: aws.String(cloud.TagCreatedAt), Value: aws.String(old)},
		}},
		{NetworkInterfaceId: aws.String("eni-0theirs"), Status: types.NetworkInterfaceStatusAvailable, TagSet: []types.Tag{
			{Key: aws.String(cloud.TagCreatedAt), Value: aws.String(old)},
		}},
	}}, nil)
	p := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow, ENITags: map[string]string{cloud.TagClusterName: "prod"}})
	got, err := p.(cloud.LeakSweeper).DeleteLeakedENIs(context.Background(), time.Minute)
	if err != nil || len(got) != 0 {
		t.Fatalf("deleted %v, %v; want nothing", got, err)
	}
}
