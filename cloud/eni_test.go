package cloud_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/mocks/mock_cloud"
)

const newENI = "eni-0new"

func expectCreate(api *mock_cloud.MockEC2) *gomock.Call {
	return api.EXPECT().CreateNetworkInterface(gomock.Any(), &ec2.CreateNetworkInterfaceInput{
		SubnetId:    aws.String(subnetID),
		Groups:      []string{sgID, "sg-0ddd"},
		Description: aws.String("vpccni ENI of " + instanceID),
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeNetworkInterface,
			Tags: []types.Tag{
				{Key: aws.String("node.k8s.amazonaws.com/instance_id"), Value: aws.String(instanceID)},
				{Key: aws.String("vpccni/managed"), Value: aws.String("true")},
				{Key: aws.String("vpccni/created-at"), Value: aws.String("2026-01-02T02:04:05Z")},
			},
		}},
	}).Return(&ec2.CreateNetworkInterfaceOutput{NetworkInterface: &types.NetworkInterface{
		NetworkInterfaceId: aws.String(newENI), MacAddress: aws.String("02:00:00:01:00:01"),
		PrivateIpAddress: aws.String("10.0.1.40"), SubnetId: aws.String(subnetID),
	}}, nil)
}

func expectAttach(api *mock_cloud.MockEC2, device int32) *gomock.Call {
	return api.EXPECT().AttachNetworkInterface(gomock.Any(), &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(device), InstanceId: aws.String(instanceID), NetworkInterfaceId: aws.String(newENI),
	})
}

func expectDelete(api *mock_cloud.MockEC2, id string) *gomock.Call {
	return api.EXPECT().DeleteNetworkInterface(gomock.Any(), &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
}

// TestAllocENIRequests: create in the primary's subnet with its groups and
// the tags, attach at the lowest free device (1: 0 and 2 are taken), set
// DeleteOnTermination on that attachment.
func TestAllocENIRequests(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	gomock.InOrder(
		expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10"), attachedENI("eni-0trunk", 2, "10.0.1.30")),
		expectCreate(api),
		expectAttach(api, 1).Return(&ec2.AttachNetworkInterfaceOutput{AttachmentId: aws.String("eni-attach-9")}, nil),
		api.EXPECT().ModifyNetworkInterfaceAttribute(gomock.Any(), &ec2.ModifyNetworkInterfaceAttributeInput{
			NetworkInterfaceId: aws.String(newENI),
			Attachment:         &types.NetworkInterfaceAttachmentChanges{AttachmentId: aws.String("eni-attach-9"), DeleteOnTermination: aws.Bool(true)},
		}).Return(&ec2.ModifyNetworkInterfaceAttributeOutput{}, nil),
	)
	eni, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.ENI{ID: newENI, MAC: "02:00:00:01:00:01", DeviceNumber: 1, PrimaryIP: netip.MustParseAddr("10.0.1.40"),
		SubnetID: subnetID, Subnet: netip.MustParsePrefix("10.0.1.0/24"), Gateway: netip.MustParseAddr("10.0.1.1")}
	if !reflect.DeepEqual(eni, want) {
		t.Fatalf("ENI\n got %+v\nwant %+v", eni, want)
	}
}

// TestAllocENIAttachFails: the created ENI is deleted again and the error
// keeps EC2's code.
func TestAllocENIAttachFails(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	gomock.InOrder(
		expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10")),
		expectCreate(api),
		expectAttach(api, 1).Return(nil, apiErr(cloud.CodeAttachmentLimitExceeded)),
		expectDelete(api, newENI).Return(&ec2.DeleteNetworkInterfaceOutput{}, nil),
	)
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(context.Background())
	if cloud.ErrorCode(err) != cloud.CodeAttachmentLimitExceeded || !strings.Contains(err.Error(), "AttachNetworkInterface "+newENI) ||
		!strings.Contains(err.Error(), "device 1") {
		t.Fatalf("err %v", err)
	}
}

// TestAllocENIAttachCancelled: a cancelled attach still deletes the ENI
// (the cleanup does not inherit the cancellation).
func TestAllocENIAttachCancelled(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	gomock.InOrder(
		expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10")),
		expectCreate(api),
		expectAttach(api, 1).DoAndReturn(func(context.Context, *ec2.AttachNetworkInterfaceInput, ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
			cancel()
			return nil, context.Canceled
		}),
		expectDelete(api, newENI).DoAndReturn(func(ctx context.Context, _ *ec2.DeleteNetworkInterfaceInput, _ ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error) {
			if err := ctx.Err(); err != nil {
				t.Errorf("cleanup ran with an ended context: %v", err)
			}
			if _, ok := ctx.Deadline(); !ok {
				t.Error("cleanup has no deadline")
			}
			return &ec2.DeleteNetworkInterfaceOutput{}, nil
		}),
	)
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestAllocENIAttachAndCleanupFail(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	gomock.InOrder(
		expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10")),
		expectCreate(api),
		expectAttach(api, 1).Return(nil, apiErr(cloud.CodeRequestLimitExceeded)),
		expectDelete(api, newENI).Return(nil, apiErr("InternalError")),
	)
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(context.Background())
	if !cloud.IsThrottled(err) || !strings.Contains(err.Error(), "after the failed attach") || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("err %v", err)
	}
}

// TestAllocENIModifyFails: the attached ENI is detached and deleted again.
func TestAllocENIModifyFails(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	gomock.InOrder(
		expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10")),
		expectCreate(api),
		expectAttach(api, 1).Return(&ec2.AttachNetworkInterfaceOutput{AttachmentId: aws.String("eni-attach-9")}, nil),
		api.EXPECT().ModifyNetworkInterfaceAttribute(gomock.Any(), gomock.Any()).Return(nil, apiErr("InternalError")),
		api.EXPECT().DetachNetworkInterface(gomock.Any(), &ec2.DetachNetworkInterfaceInput{AttachmentId: aws.String("eni-attach-9"), Force: aws.Bool(false)}).
			Return(&ec2.DetachNetworkInterfaceOutput{}, nil),
		expectDelete(api, newENI).Return(&ec2.DeleteNetworkInterfaceOutput{}, nil),
	)
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow, Sleep: (&sleeps{}).sleep}).AllocENI(context.Background())
	if cloud.ErrorCode(err) != "InternalError" || !strings.Contains(err.Error(), "DeleteOnTermination") {
		t.Fatalf("err %v", err)
	}
}

// TestAllocENINoFreeDevice: every slot taken means no EC2 call beyond the
// describe, and ErrNoFreeDevice.
func TestAllocENINoFreeDevice(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10"), attachedENI("eni-1", 1, "10.0.1.20"), attachedENI("eni-2", 2, "10.0.1.30"))
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(context.Background())
	if !errors.Is(err, cloud.ErrNoFreeDevice) || !strings.Contains(err.Error(), "m5.large") {
		t.Fatalf("err %v", err)
	}
}

func TestAllocENICreateFails(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectAttached(api, attachedENI("eni-0prim", 0, "10.0.1.10"))
	api.EXPECT().CreateNetworkInterface(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeInsufficientFreeAddresses))
	_, err := cloud.NewProvider(api, md, cloud.ProviderOptions{Now: fixedNow}).AllocENI(context.Background())
	if !cloud.IsSubnetFull(err) || !strings.Contains(err.Error(), "CreateNetworkInterface in "+subnetID) {
		t.Fatalf("err %v", err)
	}
}

func expectDescribeOne(api *mock_cloud.MockEC2, ni types.NetworkInterface) *gomock.Call {
	return api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{aws.ToString(ni.NetworkInterfaceId)}}).
		Return(&ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: []types.NetworkInterface{ni}}, nil)
}

// TestFreeENIRetriesDeleteWhileInUse: detach (not forced), then delete
// retried while EC2 says in use, with doubling waits.
func TestFreeENIRetriesDeleteWhileInUse(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	gomock.InOrder(
		expectDescribeOne(api, attachedENI(newENI, 1, "10.0.1.40")),
		api.EXPECT().DetachNetworkInterface(gomock.Any(), &ec2.DetachNetworkInterfaceInput{AttachmentId: aws.String("eni-attach-" + newENI), Force: aws.Bool(false)}).
			Return(&ec2.DetachNetworkInterfaceOutput{}, nil),
		expectDelete(api, newENI).Return(nil, apiErr(cloud.CodeENIInUse)).Times(2),
		expectDelete(api, newENI).Return(&ec2.DeleteNetworkInterfaceOutput{}, nil),
	)
	s := &sleeps{}
	if err := cloud.NewProvider(api, md, cloud.ProviderOptions{Sleep: s.sleep}).FreeENI(context.Background(), newENI); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !reflect.DeepEqual(s.waits, want) {
		t.Errorf("waits %v, want %v", s.waits, want)
	}
}

func TestFreeENIGivesUp(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectDescribeOne(api, attachedENI(newENI, 1, "10.0.1.40"))
	api.EXPECT().DetachNetworkInterface(gomock.Any(), gomock.Any()).Return(&ec2.DetachNetworkInterfaceOutput{}, nil)
	expectDelete(api, newENI).Return(nil, apiErr(cloud.CodeENIInUse)).Times(3)
	s := &sleeps{}
	err := cloud.NewProvider(api, md, cloud.ProviderOptions{Sleep: s.sleep, DeleteAttempts: 3, DeleteRetryDelay: time.Millisecond}).
		FreeENI(context.Background(), newENI)
	if cloud.ErrorCode(err) != cloud.CodeENIInUse || !strings.Contains(err.Error(), "attempt 3 of 3") {
		t.Fatalf("err %v", err)
	}
	if len(s.waits) != 2 || s.waits[0] != time.Millisecond {
		t.Errorf("waits %v", s.waits)
	}
}

// TestFreeENIDefaultSleepHonoursContext: without a Sleep option the wait
// is a real timer that a cancelled context cuts short.
func TestFreeENIDefaultSleepHonoursContext(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	expectDescribeOne(api, attachedENI(newENI, 1, "10.0.1.40"))
	api.EXPECT().DetachNetworkInterface(gomock.Any(), gomock.Any()).Return(&ec2.DetachNetworkInterfaceOutput{}, nil)
	expectDelete(api, newENI).DoAndReturn(func(context.Context, *ec2.DeleteNetworkInterfaceInput, ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error) {
		cancel()
		return nil, apiErr(cloud.CodeENIInUse)
	})
	start := time.Now()
	err := cloud.NewProvider(api, md, cloud.ProviderOptions{DeleteRetryDelay: time.Hour}).FreeENI(ctx, newENI)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestFreeENIRefuses(t *testing.T) {
	foreign := attachedENI(newENI, 1, "10.0.1.40")
	foreign.Attachment.InstanceId = aws.String("i-0other")
	for name, c := range map[string]struct {
		ni   types.NetworkInterface
		want string
	}{
		"primary": {attachedENI("eni-0prim", 0, "10.0.1.10"), "primary ENI"},
		"foreign": {foreign, "i-0other"},
	} {
		t.Run(name, func(t *testing.T) {
			api, md := newMocks(t)
			fakeIMDS(md, nodeIMDS(nil), nil)
			expectDescribeOne(api, c.ni)
			err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).FreeENI(context.Background(), aws.ToString(c.ni.NetworkInterfaceId))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// TestFreeENIDetached: an ENI no longer attached is only deleted.
func TestFreeENIDetached(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectDescribeOne(api, types.NetworkInterface{NetworkInterfaceId: aws.String(newENI)})
	expectDelete(api, newENI).Return(&ec2.DeleteNetworkInterfaceOutput{}, nil)
	if err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).FreeENI(context.Background(), newENI); err != nil {
		t.Fatal(err)
	}
}

func TestFreeENIUnknown(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), gomock.Any()).Return(nil, apiErr(cloud.CodeENINotFound))
	err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).FreeENI(context.Background(), "eni-0gone")
	if !cloud.IsNotFound(err) || !strings.Contains(err.Error(), "eni-0gone") {
		t.Fatalf("err %v", err)
	}
}

// TestFreeENIGoneAfterDetach: NotFound on the delete after our detach
// means someone else finished the job.
func TestFreeENIGoneAfterDetach(t *testing.T) {
	api, md := newMocks(t)
	fakeIMDS(md, nodeIMDS(nil), nil)
	expectDescribeOne(api, attachedENI(newENI, 1, "10.0.1.40"))
	api.EXPECT().DetachNetworkInterface(gomock.Any(), gomock.Any()).Return(&ec2.DetachNetworkInterfaceOutput{}, nil)
	expectDelete(api, newENI).Return(nil, apiErr(cloud.CodeENINotFound))
	if err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).FreeENI(context.Background(), newENI); err != nil {
		t.Fatal(err)
	}
}
