package memory

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/vpccni/vpccni/cloud"
)

func mustCloud(t *testing.T, typ string, opt Options) *Cloud {
	t.Helper()
	c, err := NewWithOptions(typ, opt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustInstance(t *testing.T, c *Cloud) cloud.Instance {
	t.Helper()
	inst, err := c.Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// wantCode fails the test unless err carries the EC2 error code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := cloud.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

// available is the subnet's free-address count as DescribeSubnets says.
func available(t *testing.T, c *Cloud, subnetID string) int {
	t.Helper()
	out, err := c.DescribeSubnets(context.Background(), &ec2.DescribeSubnetsInput{SubnetIds: []string{subnetID}})
	if err != nil {
		t.Fatal(err)
	}
	return int(aws.ToInt32(out.Subnets[0].AvailableIpAddressCount))
}

// createENI creates an ENI in the subnet through EC2 directly.
func createENI(t *testing.T, c *Cloud, subnetID string) string {
	t.Helper()
	out, err := c.CreateNetworkInterface(context.Background(), &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(subnetID)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.NetworkInterface.NetworkInterfaceId)
}
