package ipamd

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
)

// leakENI creates an available ENI in c's subnet as an ipamd of cluster
// that died before attaching it would leave it, created at created.
func leakENI(t *testing.T, c *memory.Cloud, cluster string, created time.Time) string {
	t.Helper()
	inst, err := c.Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tags := []types.Tag{
		{Key: aws.String(cloud.TagManaged), Value: aws.String(cloud.TagManagedValue)},
		{Key: aws.String(cloud.TagClusterName), Value: aws.String(cluster)},
		{Key: aws.String(cloud.TagCreatedAt), Value: aws.String(created.UTC().Format(time.RFC3339))},
	}
	out, err := c.CreateNetworkInterface(context.Background(), &ec2.CreateNetworkInterfaceInput{
		SubnetId: aws.String(inst.SubnetID), Groups: inst.SecurityGroups,
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface, Tags: tags}}})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.NetworkInterface.NetworkInterfaceId)
}

// available lists the IDs of c's VPC's available ENIs.
func available(t *testing.T, c *memory.Cloud) []string {
	t.Helper()
	out, err := c.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("status"), Values: []string{"available"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ni := range out.NetworkInterfaces {
		ids = append(ids, aws.ToString(ni.NetworkInterfaceId))
	}
	return ids
}

// waitGone waits up to a few seconds for id to leave the available ENIs.
func waitGone(t *testing.T, c *memory.Cloud, id string, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !slices.Contains(available(t, c), id) {
			return
		}
	}
	t.Fatalf("%s: leaked ENI %s still there after 5s of the real-clock loop (available: %v)", what, id, available(t, c))
}

// On the real clock (the binary's loops, no Tick), the sweep deletes a
// leaked ENI at start, keeps sweeping every interval (an ENI leaked
// later goes too), spares another cluster's, and ends with the daemon:
// Stop returns (it waits for its loops) and nothing is swept after.
func TestLeakSweepLoopOnTheRealClock(t *testing.T) {
	c, err := memory.NewWithOptions("m5.large", memory.Options{
		Provider: cloud.ProviderOptions{ENITags: map[string]string{cloud.TagClusterName: "prod"}}})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	atStart := leakENI(t, c, "prod", old)
	otherCluster := leakENI(t, c, "dev", old)

	// The interval's range starts at a minute, too long for a test: the
	// daemon is built with the shortest allowed and its copy of the
	// setting shortened before its loops start.
	const interval = 20 * time.Millisecond
	cfg := Config{SocketPath: sockPath(t), Cloud: c.Provider(), LeakSweep: LeakSweep{Interval: time.Minute, MinAge: time.Minute}}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.cfg.LeakSweep.Interval = interval
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Stop()
		}
	})

	waitGone(t, c, atStart, "the sweep at start")
	later := leakENI(t, c, "prod", old) // after the first sweep: only a later one can take it
	waitGone(t, c, later, "a sweep an interval later")
	if !slices.Contains(available(t, c), otherCluster) {
		t.Fatalf("another cluster's ENI %s was swept", otherCluster)
	}

	done := make(chan struct{})
	stopped = true // (a second Stop, in cleanup, would wait on this one for ever)
	go func() { d.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return: a loop (the sweeper's?) ignores the end of its context")
	}
	afterStop := leakENI(t, c, "prod", old)
	time.Sleep(20 * interval)
	if !slices.Contains(available(t, c), afterStop) {
		t.Fatalf("leaked ENI %s swept after Stop: the sweeper outlived the daemon", afterStop)
	}
}
