package cloud_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/failpoint"
)

// launchArmed launches an m5.large into v whose provider fires point
// with action on its next hit (and stamps fixedNow unless opt has a
// clock).
func launchArmed(t *testing.T, v *memory.VPC, point failpoint.Name, action failpoint.Action, opt cloud.ProviderOptions) *memory.Cloud {
	t.Helper()
	fp := &failpoint.Set{}
	if err := fp.Arm(point, action, 1); err != nil {
		t.Fatal(err)
	}
	opt.Failpoints = fp
	if opt.Now == nil {
		opt.Now = fixedNow
	}
	c, err := v.Launch("m5.large", memory.Options{Provider: opt})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustNewVPC(t *testing.T) *memory.VPC {
	t.Helper()
	v, err := memory.NewVPC(memory.VPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// callsSince lists the calls (with their error codes) c answered from
// call number start on.
func callsSince(c *memory.Cloud, start int) []memory.Call {
	return c.Calls()[start:]
}

func ok(api string) memory.Call { return memory.Call{API: api} }

// describeOne returns the ENI as EC2 describes it, with its tags as a map.
func describeOne(t *testing.T, c *memory.Cloud, id string) (types.NetworkInterface, map[string]string) {
	t.Helper()
	d, err := c.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	ni := d.NetworkInterfaces[0]
	tags := map[string]string{}
	for _, tg := range ni.TagSet {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return ni, tags
}

// TestAllocENICrashBeforeAttach: the process dies after the create, so
// AllocENI returns the fault and makes no further call; the ENI stays
// available in EC2 with vpccni's tags, the leak a sweep must find.
func TestAllocENICrashBeforeAttach(t *testing.T) {
	v := mustNewVPC(t)
	c := launchArmed(t, v, cloud.FailAllocBeforeAttach, failpoint.Crash, cloud.ProviderOptions{})
	start := len(c.Calls())
	_, err := c.Provider().AllocENI(context.Background())
	f, isFault := failpoint.As(err)
	if !isFault || f.Name != cloud.FailAllocBeforeAttach || f.Action != failpoint.Crash {
		t.Fatalf("AllocENI: %v, want the crash fault", err)
	}
	want := []memory.Call{ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface")}
	if got := callsSince(c, start); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v (no cleanup after a crash)", got, want)
	}
	left := v.AvailableENIs()
	if len(left) != 1 {
		t.Fatalf("available ENIs %+v, want the one created", left)
	}
	tags := left[0].Tags
	if tags[cloud.TagManaged] != cloud.TagManagedValue || tags[cloud.TagInstanceID] != c.InstanceID() || tags[cloud.TagCreatedAt] != "2026-01-02T02:04:05Z" {
		t.Errorf("tags %v", tags)
	}
	if inst, err := c.Provider().Instance(context.Background()); err != nil || len(inst.ENIs) != 1 {
		t.Errorf("instance ENIs %+v %v, want the primary alone", inst.ENIs, err)
	}
}

// TestAllocENICrashBeforeDeleteOnTermination: the process dies after the
// attach; the ENI is attached without DeleteOnTermination, so when the
// instance ends it stays behind, available.
func TestAllocENICrashBeforeDeleteOnTermination(t *testing.T) {
	v := mustNewVPC(t)
	c := launchArmed(t, v, cloud.FailAllocBeforeDeleteOnTermination, failpoint.Crash, cloud.ProviderOptions{})
	start := len(c.Calls())
	_, err := c.Provider().AllocENI(context.Background())
	if f, isFault := failpoint.As(err); !isFault || f.Name != cloud.FailAllocBeforeDeleteOnTermination || f.Action != failpoint.Crash {
		t.Fatalf("AllocENI: %v, want the crash fault", err)
	}
	want := []memory.Call{ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface"), ok("AttachNetworkInterface")}
	if got := callsSince(c, start); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v (no cleanup after a crash)", got, want)
	}
	inst, err := c.Provider().Instance(context.Background())
	if err != nil || len(inst.ENIs) != 2 || inst.ENIs[1].DeviceNumber != 1 {
		t.Fatalf("instance ENIs %+v %v, want the new one at device 1", inst.ENIs, err)
	}
	leaked := inst.ENIs[1].ID
	ni, _ := describeOne(t, c, leaked)
	if ni.Attachment == nil || aws.ToBool(ni.Attachment.DeleteOnTermination) {
		t.Fatalf("attachment %+v, want DeleteOnTermination false", ni.Attachment)
	}
	if len(v.AvailableENIs()) != 0 {
		t.Fatalf("available before termination: %+v", v.AvailableENIs())
	}
	if err := v.Terminate(c.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if left := v.AvailableENIs(); len(left) != 1 || left[0].ID != leaked {
		t.Fatalf("available after termination %+v, want %s", left, leaked)
	}
}

// TestAllocENIErrorAtFailpoints: an error or a hang at either point does
// what the failure of the next EC2 call does: before the attach the ENI
// is deleted, before DeleteOnTermination it is detached and deleted. The
// error carries the fault, and nothing is left in EC2.
func TestAllocENIErrorAtFailpoints(t *testing.T) {
	cases := []struct {
		point failpoint.Name
		calls []memory.Call
	}{
		{cloud.FailAllocBeforeAttach, []memory.Call{
			ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface"), ok("DeleteNetworkInterface"),
		}},
		{cloud.FailAllocBeforeDeleteOnTermination, []memory.Call{
			ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface"), ok("AttachNetworkInterface"),
			ok("DetachNetworkInterface"), ok("DeleteNetworkInterface"),
		}},
	}
	for _, tc := range cases {
		for _, action := range []failpoint.Action{failpoint.Error, failpoint.Hang} {
			t.Run(string(tc.point)+"/"+string(action), func(t *testing.T) {
				v := mustNewVPC(t)
				c := launchArmed(t, v, tc.point, action, cloud.ProviderOptions{})
				start := len(c.Calls())
				_, err := c.Provider().AllocENI(context.Background())
				if f, isFault := failpoint.As(err); !isFault || f.Name != tc.point || f.Action != action {
					t.Fatalf("AllocENI: %v, want an error carrying the fault", err)
				}
				if got := callsSince(c, start); !reflect.DeepEqual(got, tc.calls) {
					t.Fatalf("calls %v, want %v", got, tc.calls)
				}
				if left := v.AvailableENIs(); len(left) != 0 {
					t.Errorf("left in EC2: %+v", left)
				}
				if inst, err := c.Provider().Instance(context.Background()); err != nil || len(inst.ENIs) != 1 {
					t.Errorf("instance ENIs %+v %v, want the primary alone", inst.ENIs, err)
				}
				// Armed for one hit: the next allocation goes through.
				if e, err := c.Provider().AllocENI(context.Background()); err != nil || e.DeviceNumber != 1 {
					t.Errorf("next AllocENI: %+v %v", e, err)
				}
			})
		}
	}
}

// TestAllocENIRealFailuresCleanUpAlike: the cleanup calls a failpoint's
// error makes are those of the real failure it stands for.
func TestAllocENIRealFailuresCleanUpAlike(t *testing.T) {
	cases := []struct {
		api   string
		calls []memory.Call
	}{
		{"AttachNetworkInterface", []memory.Call{
			ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface"), {API: "AttachNetworkInterface", Err: cloud.CodeAttachmentLimitExceeded},
			ok("DeleteNetworkInterface"),
		}},
		{"ModifyNetworkInterfaceAttribute", []memory.Call{
			ok("DescribeNetworkInterfaces"), ok("CreateNetworkInterface"), ok("AttachNetworkInterface"),
			{API: "ModifyNetworkInterfaceAttribute", Err: cloud.CodeAttachmentLimitExceeded},
			ok("DetachNetworkInterface"), ok("DeleteNetworkInterface"),
		}},
	}
	for _, tc := range cases {
		v := mustNewVPC(t)
		c, err := v.Launch("m5.large", memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.InjectFault(tc.api, memory.Fault{Code: cloud.CodeAttachmentLimitExceeded, Times: 1})
		start := len(c.Calls())
		if _, err := c.Provider().AllocENI(context.Background()); cloud.ErrorCode(err) != cloud.CodeAttachmentLimitExceeded {
			t.Fatalf("%s failing: %v", tc.api, err)
		}
		if got := callsSince(c, start); !reflect.DeepEqual(got, tc.calls) {
			t.Errorf("%s failing: calls %v, want %v", tc.api, got, tc.calls)
		}
	}
}
