package cloud_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/mocks/mock_cloud"
)

const (
	instanceID = "i-0aaa"
	primaryMAC = "02:00:00:00:00:01"
	subnetID   = "subnet-0bbb"
	sgID       = "sg-0ccc"
)

// apiErr is an EC2 error as the SDK returns it.
func apiErr(code string) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: "Op", Err: &smithy.GenericAPIError{Code: code, Message: "test"}}
}

// metadataStatus is an IMDS error answer with an HTTP status.
func metadataStatus(status int) error {
	return &smithy.OperationError{ServiceID: "ec2imds", OperationName: "GetMetadata", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: errors.New("request to EC2 IMDS failed"),
	}}
}

// fakeIMDS answers GetMetadata from keys (absent keys are 404s) and
// counts the reads of each key.
func fakeIMDS(md *mock_cloud.MockMetadata, keys map[string]string, reads map[string]int) {
	md.EXPECT().GetMetadata(gomock.Any(), gomock.Any()).AnyTimes().DoAndReturn(
		func(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
			if reads != nil {
				reads[in.Path]++
			}
			v, ok := keys[in.Path]
			if !ok {
				return nil, metadataStatus(http.StatusNotFound)
			}
			return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(v))}, nil
		})
}

func macKey(mac, k string) string { return "network/interfaces/macs/" + mac + "/" + k }

// nodeIMDS is an m5.large with the primary ENI and, if extra is given,
// more ENIs: MAC → {device, eni ID, local-ipv4s}.
func nodeIMDS(extra map[string][3]string) map[string]string {
	keys := map[string]string{
		"instance-id": instanceID, "instance-type": "m5.large", "mac": primaryMAC,
	}
	macs := []string{}
	add := func(mac, dev, id, ips string) {
		macs = append(macs, mac+"/")
		keys[macKey(mac, "device-number")] = dev
		keys[macKey(mac, "interface-id")] = id
		keys[macKey(mac, "subnet-id")] = subnetID
		keys[macKey(mac, "subnet-ipv4-cidr-block")] = "10.0.1.0/24"
		keys[macKey(mac, "local-ipv4s")] = ips
		keys[macKey(mac, "security-group-ids")] = sgID + "\nsg-0ddd"
	}
	for mac, v := range extra {
		add(mac, v[0], v[1], v[2])
	}
	add(primaryMAC, "0", "eni-0prim", "10.0.1.10\n10.0.1.11")
	keys["network/interfaces/macs/"] = strings.Join(macs, "\n")
	return keys
}

// attachedENI is DescribeNetworkInterfaces' item of an ENI attached at a
// device, with its addresses (the first primary).
func attachedENI(id string, device int32, ips ...string) types.NetworkInterface {
	ni := types.NetworkInterface{
		NetworkInterfaceId: aws.String(id),
		InterfaceType:      types.NetworkInterfaceTypeInterface,
		Attachment: &types.NetworkInterfaceAttachment{
			AttachmentId: aws.String("eni-attach-" + id), DeviceIndex: aws.Int32(device),
			InstanceId: aws.String(instanceID), Status: types.AttachmentStatusAttached,
		},
	}
	for i, ip := range ips {
		ni.PrivateIpAddresses = append(ni.PrivateIpAddresses, types.NetworkInterfacePrivateIpAddress{PrivateIpAddress: aws.String(ip), Primary: aws.Bool(i == 0)})
	}
	return ni
}

// expectAttached expects the describe-attached call and answers it.
func expectAttached(api *mock_cloud.MockEC2, enis ...types.NetworkInterface) *gomock.Call {
	return api.EXPECT().DescribeNetworkInterfaces(gomock.Any(), &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{instanceID}}},
	}).Return(&ec2.DescribeNetworkInterfacesOutput{NetworkInterfaces: enis}, nil)
}

// fixedNow is ProviderOptions.Now for tests that match requests exactly:
// an hour east of UTC, so a tag that forgot to convert to UTC shows.
func fixedNow() time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("UTC+1", 3600))
}

// sleeps records the waits of ProviderOptions.Sleep without waiting.
type sleeps struct{ waits []time.Duration }

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.waits = append(s.waits, d)
	return nil
}

func newMocks(t *testing.T) (*mock_cloud.MockEC2, *mock_cloud.MockMetadata) {
	ctrl := gomock.NewController(t)
	return mock_cloud.NewMockEC2(ctrl), mock_cloud.NewMockMetadata(ctrl)
}

// fakeWithError is fakeIMDS's answer function with one key failing.
func fakeWithError(keys map[string]string, failing string, err error) func(context.Context, *imds.GetMetadataInput, ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	return func(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
		if in.Path == failing {
			return nil, err
		}
		v, ok := keys[in.Path]
		if !ok {
			return nil, metadataStatus(http.StatusNotFound)
		}
		return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(v))}, nil
	}
}
