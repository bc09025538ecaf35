package cloud_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
)

// The provider on the memory cloud: the whole path ipamd takes, with the
// model checking the requests.

func TestProviderLifecycleOnMemory(t *testing.T) {
	ctx := context.Background()
	s := &sleeps{}
	c, err := memory.NewWithOptions("m5.large", memory.Options{Bare: true, Provider: cloud.ProviderOptions{Sleep: s.sleep}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Provider()
	eni, err := p.AllocENI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ips, err := p.AssignIPv4(ctx, eni.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	pfx, err := p.AssignIPv4Prefixes(ctx, eni.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := p.Instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := eni
	want.IPv4, want.IPv4Prefixes = ips, pfx
	if len(inst.ENIs) != 2 || !reflect.DeepEqual(inst.ENIs[1], want) {
		t.Fatalf("Instance lists\n%+v\nwant\n%+v", inst.ENIs, want)
	}

	// What EC2 holds: tags, groups, DeleteOnTermination.
	d, err := c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eni.ID}})
	if err != nil {
		t.Fatal(err)
	}
	ni := d.NetworkInterfaces[0]
	tags := map[string]string{}
	for _, tg := range ni.TagSet {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	if tags[cloud.TagInstanceID] != inst.ID || tags[cloud.TagManaged] != "true" {
		t.Errorf("tags %v", tags)
	}
	if !aws.ToBool(ni.Attachment.DeleteOnTermination) || aws.ToString(ni.Groups[0].GroupId) != inst.SecurityGroups[0] {
		t.Errorf("attachment %+v groups %+v", ni.Attachment, ni.Groups)
	}

	if err := p.UnassignIPv4(ctx, eni.ID, ips[:1]); err != nil {
		t.Fatal(err)
	}
	if err := p.UnassignIPv4Prefixes(ctx, eni.ID, pfx); err != nil {
		t.Fatal(err)
	}
	// EC2 still finishing the detach: the delete is retried.
	c.InjectFault("DeleteNetworkInterface", memory.Fault{Code: cloud.CodeENIInUse, Times: 2})
	if err := p.FreeENI(ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !reflect.DeepEqual(s.waits, want) {
		t.Errorf("waits %v, want %v", s.waits, want)
	}
	if inst, _ := p.Instance(ctx); len(inst.ENIs) != 1 {
		t.Fatalf("ENIs after FreeENI: %+v", inst.ENIs)
	}
	if err := p.FreeENI(ctx, eni.ID); !cloud.IsNotFound(err) {
		t.Fatalf("second FreeENI: %v, want not found", err)
	}
	primary := inst.ENIs[0].ID
	if err := p.FreeENI(ctx, primary); err == nil {
		t.Fatal("freed the primary ENI")
	}
}

// TestProviderFillsEveryDevice: AllocENI takes devices 1, 2, … until the
// type's limit, then says so.
// TestENITags: the configured tags go on every ENI AllocENI creates,
// beside its own, which they cannot replace; the creation time is
// ProviderOptions.Now's, in UTC.
func TestENITags(t *testing.T) {
	ctx := context.Background()
	extra := map[string]string{"team": "net", cloud.TagClusterName: "prod", cloud.TagManaged: "no", cloud.TagCreatedAt: "2000-01-01T00:00:00Z"}
	c, err := memory.NewWithOptions("m5.large", memory.Options{Bare: true, Provider: cloud.ProviderOptions{ENITags: extra, Now: fixedNow}})
	if err != nil {
		t.Fatal(err)
	}
	eni, err := c.Provider().AllocENI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eni.ID}})
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, tg := range d.NetworkInterfaces[0].TagSet {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	if tags["team"] != "net" || tags[cloud.TagClusterName] != "prod" || tags[cloud.TagManaged] != "true" || tags[cloud.TagInstanceID] == "" ||
		tags[cloud.TagCreatedAt] != "2026-01-02T02:04:05Z" || len(tags) != 5 {
		t.Fatalf("tags %v", tags)
	}
}

func TestProviderFillsEveryDevice(t *testing.T) {
	c, err := memory.NewWithOptions("m5.4xlarge", memory.Options{Bare: true})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Provider()
	for want := 1; want < 8; want++ {
		eni, err := p.AllocENI(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if eni.DeviceNumber != want {
			t.Fatalf("device %d, want %d", eni.DeviceNumber, want)
		}
	}
	if _, err := p.AllocENI(context.Background()); err == nil || cloud.ErrorCode(err) != "" {
		t.Fatalf("9th ENI: %v, want ErrNoFreeDevice before any EC2 call", err)
	}
	// Freeing device 3 makes it the next one.
	inst, _ := p.Instance(context.Background())
	if err := p.FreeENI(context.Background(), inst.ENIs[3].ID); err != nil {
		t.Fatal(err)
	}
	if eni, err := p.AllocENI(context.Background()); err != nil || eni.DeviceNumber != 3 {
		t.Fatalf("after freeing 3: %+v %v", eni, err)
	}
}

// TestMemoryInstanceIsTheProvidersInstance: the convenience method and
// the provider agree.
func TestMemoryInstanceIsTheProvidersInstance(t *testing.T) {
	c, err := memory.NewWithOptions("m5.large", memory.Options{Trunk: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := cloud.NewProvider(c, c, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("differ:\n%+v\n%+v", a, b)
	}
	if tr, ok := a.Trunk(); !ok || tr.DeviceNumber != 2 {
		t.Fatalf("trunk %+v %v", tr, ok)
	}
}
