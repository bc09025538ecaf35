package cloud

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// knownLimits holds the instance types the tests, scenarios and the memory
// cloud use, with EC2's published numbers. Unexported so no caller can
// change EC2's numbers under another's feet; a type not listed here is
// looked up with DescribeInstanceTypes.
var knownLimits = map[string]Limits{
	"t3.medium":   {ENIs: 3, IPv4PerENI: 6, IPv6: true, Trunk: false},
	"m5.large":    {ENIs: 3, IPv4PerENI: 10, IPv6: true, Trunk: true},
	"m5.4xlarge":  {ENIs: 8, IPv4PerENI: 30, IPv6: true, Trunk: true},
	"c5.18xlarge": {ENIs: 15, IPv4PerENI: 50, IPv6: true, Trunk: true},
}

// LimitsOf returns the limits of an instance type of the static table.
func LimitsOf(instanceType string) (Limits, bool) {
	l, ok := knownLimits[instanceType]
	return l, ok
}

// KnownTypes lists the instance types of the static table, sorted.
func KnownTypes() []string {
	return slices.Sorted(maps.Keys(knownLimits))
}

// limitsFromEC2 asks EC2 for the limits of a type the table does not
// know. EC2 does not say whether a type supports a trunk ENI (the VPC
// resource controller keeps its own list), so Trunk is false: without
// knowing, ipamd must not reserve a slot for one.
func limitsFromEC2(ctx context.Context, api EC2, instanceType string) (Limits, error) {
	out, err := api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{
		InstanceTypes: []types.InstanceType{types.InstanceType(instanceType)},
	})
	if err != nil {
		return Limits{}, fmt.Errorf("DescribeInstanceTypes %s: %w", instanceType, err)
	}
	for _, it := range out.InstanceTypes {
		if string(it.InstanceType) != instanceType {
			continue
		}
		ni := it.NetworkInfo
		if ni == nil || ni.MaximumNetworkInterfaces == nil || ni.Ipv4AddressesPerInterface == nil {
			return Limits{}, fmt.Errorf("DescribeInstanceTypes %s: no network limits in the answer", instanceType)
		}
		l := Limits{
			ENIs:       int(*ni.MaximumNetworkInterfaces),
			IPv4PerENI: int(*ni.Ipv4AddressesPerInterface),
			IPv6:       ni.Ipv6Supported != nil && *ni.Ipv6Supported,
		}
		if l.ENIs < 1 || l.IPv4PerENI < 1 {
			return Limits{}, fmt.Errorf("DescribeInstanceTypes %s: implausible limits %d ENIs, %d IPv4 per ENI", instanceType, l.ENIs, l.IPv4PerENI)
		}
		return l, nil
	}
	return Limits{}, fmt.Errorf("DescribeInstanceTypes %s: type missing from the answer", instanceType)
}
