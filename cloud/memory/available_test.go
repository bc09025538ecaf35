package memory

import (
	"maps"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

var availableFilter = &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{
	{Name: aws.String("status"), Values: []string{"available"}},
}}

// checkAvailableIndex fails unless the VPC's index of available ENIs is
// what a scan of all its ENIs finds, the describe on status available
// looks at those alone, and answers them in ID order.
func checkAvailableIndex(t *testing.T, v *VPC, c *Cloud, step string) []string {
	t.Helper()
	v.v.mu.Lock()
	var scan []string
	for id, e := range v.v.enis {
		if e.att == nil {
			scan = append(scan, id)
		}
	}
	slices.Sort(scan)
	index := slices.Sorted(maps.Keys(v.v.available))
	cands, err := c.describeCandidates("DescribeNetworkInterfaces", availableFilter)
	v.v.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(index, scan) {
		t.Fatalf("%s: index %v, scan %v", step, index, scan)
	}
	var candIDs []string
	for _, e := range cands {
		candIDs = append(candIDs, e.id)
	}
	if !slices.Equal(candIDs, scan) {
		t.Fatalf("%s: describe looks at %v, want the available %v", step, candIDs, scan)
	}
	out, err := c.DescribeNetworkInterfaces(bg, availableFilter)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ni := range out.NetworkInterfaces {
		got = append(got, aws.ToString(ni.NetworkInterfaceId))
	}
	if !slices.Equal(got, scan) {
		t.Fatalf("%s: describe answers %v, want %v", step, got, scan)
	}
	return scan
}

// createAvailable creates an ENI in c's subnet through the API, as
// AllocENI's first step does.
func createAvailable(t *testing.T, c *Cloud, tags map[string]string) string {
	t.Helper()
	inst := mustInstance(t, c)
	in := &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(inst.SubnetID), Groups: inst.SecurityGroups}
	ts := types.TagSpecification{ResourceType: types.ResourceTypeNetworkInterface}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		ts.Tags = append(ts.Tags, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	in.TagSpecifications = []types.TagSpecification{ts}
	out, err := c.CreateNetworkInterface(bg, in)
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.NetworkInterface.NetworkInterfaceId)
}

// TestVPCAvailableIndex: the index follows creates, attaches, detaches,
// deletes and a termination, and another instance of the VPC can delete
// an available ENI the first one created and last had attached.
func TestVPCAvailableIndex(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	if got := checkAvailableIndex(t, v, a, "launch"); len(got) != 0 {
		t.Fatalf("available after launch: %v", got)
	}
	kept := mustAllocENI(t, a) // create, attach, DeleteOnTermination
	x := createAvailable(t, a, map[string]string{cloud.TagInstanceID: a.InstanceID()})
	y := createAvailable(t, a, nil)
	if got := checkAvailableIndex(t, v, b, "create"); !slices.Equal(got, sorted(x, y)) {
		t.Fatalf("available after creates %v, want %s %s", got, x, y)
	}
	// x attached to a at device 2 without DeleteOnTermination, y to b.
	if _, err := a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(2), InstanceId: aws.String(a.InstanceID()), NetworkInterfaceId: aws.String(x)}); err != nil {
		t.Fatal(err)
	}
	yAtt, err := a.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: aws.String(b.InstanceID()), NetworkInterfaceId: aws.String(y)})
	if err != nil {
		t.Fatal(err)
	}
	if got := checkAvailableIndex(t, v, a, "attach"); len(got) != 0 {
		t.Fatalf("available after attaches: %v", got)
	}
	if _, err := b.DetachNetworkInterface(bg, &ec2.DetachNetworkInterfaceInput{AttachmentId: yAtt.AttachmentId}); err != nil {
		t.Fatal(err)
	}
	if got := checkAvailableIndex(t, v, a, "detach"); !slices.Equal(got, []string{y}) {
		t.Fatalf("available after detach %v, want %s", got, y)
	}
	if _, err := a.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(y)}); err != nil {
		t.Fatal(err)
	}
	if got := checkAvailableIndex(t, v, a, "delete"); len(got) != 0 {
		t.Fatalf("available after delete: %v", got)
	}
	// a ends: kept (DeleteOnTermination) and its primary go, x stays.
	if err := v.Terminate(a.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if got := checkAvailableIndex(t, v, b, "terminate"); !slices.Equal(got, []string{x}) {
		t.Fatalf("available after terminate %v, want %s", got, x)
	}
	if st := v.AvailableENIs(); len(st) != 1 || st[0].ID != x || st[0].Tags[cloud.TagInstanceID] != a.InstanceID() {
		t.Fatalf("AvailableENIs %+v", st)
	}
	if _, _, held := v.Holder(kept.PrimaryIP); held {
		t.Errorf("%s's address still held after the termination", kept.ID)
	}
	// b sweeps a's leftover: EC2 lets any instance's credentials delete
	// an available ENI of the VPC.
	xIP := v.AvailableENIs()[0].PrimaryIP
	if _, err := b.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(x)}); err != nil {
		t.Fatal(err)
	}
	if got := checkAvailableIndex(t, v, b, "delete by another"); len(got) != 0 {
		t.Fatalf("available after b's delete: %v", got)
	}
	if len(v.AvailableENIs()) != 0 {
		t.Fatalf("AvailableENIs %+v", v.AvailableENIs())
	}
	if _, _, held := v.Holder(xIP); held {
		t.Errorf("%s's address %s still held", x, xIP)
	}
	// Deleting it again is EC2's not found.
	if _, err := b.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(x)}); !cloud.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestVPCDeleteOtherInstancesAvailableENI: an ENI created by one running
// instance and never attached can be deleted by another; one attached to
// a running instance cannot.
func TestVPCDeleteOtherInstancesAvailableENI(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	x := createAvailable(t, a, map[string]string{cloud.TagInstanceID: a.InstanceID(), cloud.TagManaged: cloud.TagManagedValue})
	inUse := mustAllocENI(t, a)
	if _, err := b.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(inUse.ID)}); cloud.ErrorCode(err) != cloud.CodeENIInUse {
		t.Fatalf("deleting a's attached ENI from b: %v, want in use", err)
	}
	if _, err := b.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(x)}); err != nil {
		t.Fatal(err)
	}
	checkAvailableIndex(t, v, a, "delete")
	if err := v.Terminate(a.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if st := v.AvailableENIs(); len(st) != 0 {
		t.Fatalf("AvailableENIs after a's end %+v", st)
	}
	checkAvailableIndex(t, v, b, "terminate")
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
