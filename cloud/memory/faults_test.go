package memory

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/vpccni/vpccni/cloud"
)

// TestFaultTimes: the next Times calls fail with the code, then calls
// succeed again; the log shows each outcome.
func TestFaultTimes(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	eni := mustInstance(t, c).ENIs[0].ID
	start := len(c.Calls())
	c.InjectFault("AssignPrivateIpAddresses", Fault{Code: cloud.CodeRequestLimitExceeded, Times: 2})
	p := c.Provider()
	for i := range 2 {
		_, err := p.AssignIPv4(bg, eni, 1)
		if !cloud.IsThrottled(err) {
			t.Fatalf("call %d: %v, want throttled", i, err)
		}
	}
	if _, err := p.AssignIPv4(bg, eni, 1); err != nil {
		t.Fatalf("third call: %v", err)
	}
	want := []Call{
		{API: "AssignPrivateIpAddresses", Err: cloud.CodeRequestLimitExceeded},
		{API: "AssignPrivateIpAddresses", Err: cloud.CodeRequestLimitExceeded},
		{API: "AssignPrivateIpAddresses"},
	}
	if got := c.Calls()[start:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %+v, want %+v", got, want)
	}
	// The faulted calls assigned nothing: the one success took 10.0.1.5.
	if ips := mustInstance(t, c).ENIs[0].IPv4; len(ips) != 1 || ips[0].String() != "10.0.1.5" {
		t.Errorf("addresses %v", ips)
	}
}

// TestFaultUntilCleared: Times < 0 fails every call until ClearFaults;
// Times 0 removes one API's fault.
func TestFaultUntilCleared(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	p := c.Provider()
	c.InjectFault("CreateNetworkInterface", Fault{Code: cloud.CodeInsufficientFreeAddresses, Times: -1})
	c.InjectFault("DescribeSubnets", Fault{Code: "Throttling", Times: -1})
	for range 5 {
		if _, err := p.AllocENI(bg); !cloud.IsSubnetFull(err) {
			t.Fatalf("AllocENI: %v, want subnet full", err)
		}
	}
	c.InjectFault("DescribeSubnets", Fault{})
	if _, err := c.DescribeSubnets(bg, &ec2.DescribeSubnetsInput{}); err != nil {
		t.Fatalf("Times 0 did not remove the fault: %v", err)
	}
	c.ClearFaults()
	if _, err := p.AllocENI(bg); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestFaultOnEveryAPI(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{})
	for _, api := range ec2APIs {
		c.InjectFault(api, Fault{Code: "Throttling", Times: 1})
	}
	calls := map[string]func() error{
		"CreateNetworkInterface": func() error { _, err := c.CreateNetworkInterface(bg, &ec2.CreateNetworkInterfaceInput{}); return err },
		"AttachNetworkInterface": func() error { _, err := c.AttachNetworkInterface(bg, &ec2.AttachNetworkInterfaceInput{}); return err },
		"ModifyNetworkInterfaceAttribute": func() error {
			_, err := c.ModifyNetworkInterfaceAttribute(bg, &ec2.ModifyNetworkInterfaceAttributeInput{})
			return err
		},
		"DetachNetworkInterface": func() error { _, err := c.DetachNetworkInterface(bg, &ec2.DetachNetworkInterfaceInput{}); return err },
		"DeleteNetworkInterface": func() error { _, err := c.DeleteNetworkInterface(bg, &ec2.DeleteNetworkInterfaceInput{}); return err },
		"DescribeNetworkInterfaces": func() error {
			_, err := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{})
			return err
		},
		"AssignPrivateIpAddresses": func() error {
			_, err := c.AssignPrivateIpAddresses(bg, &ec2.AssignPrivateIpAddressesInput{})
			return err
		},
		"UnassignPrivateIpAddresses": func() error {
			_, err := c.UnassignPrivateIpAddresses(bg, &ec2.UnassignPrivateIpAddressesInput{})
			return err
		},
		"AssignIpv6Addresses":   func() error { _, err := c.AssignIpv6Addresses(bg, &ec2.AssignIpv6AddressesInput{}); return err },
		"UnassignIpv6Addresses": func() error { _, err := c.UnassignIpv6Addresses(bg, &ec2.UnassignIpv6AddressesInput{}); return err },
		"DescribeInstances":     func() error { _, err := c.DescribeInstances(bg, &ec2.DescribeInstancesInput{}); return err },
		"DescribeInstanceTypes": func() error { _, err := c.DescribeInstanceTypes(bg, &ec2.DescribeInstanceTypesInput{}); return err },
		"DescribeSubnets":       func() error { _, err := c.DescribeSubnets(bg, &ec2.DescribeSubnetsInput{}); return err },
		"CreateTags":            func() error { _, err := c.CreateTags(bg, &ec2.CreateTagsInput{}); return err },
	}
	if len(calls) != len(ec2APIs) {
		t.Fatalf("test covers %d APIs, the model %d", len(calls), len(ec2APIs))
	}
	for api, call := range calls {
		err := call()
		if !cloud.IsThrottled(err) || !strings.Contains(err.Error(), api) {
			t.Errorf("%s: %v, want the injected Throttling naming the API", api, err)
		}
	}
}

func TestInjectFaultUnknownAPIPanics(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{})
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "AttachNetworkInterfaces") {
			t.Fatalf("recovered %v", r)
		}
	}()
	c.InjectFault("AttachNetworkInterfaces", Fault{Code: "Throttling", Times: 1})
}

// TestAttachDelay: a slow attach that outlasts the caller's deadline fails
// with the context's error and attaches nothing; the provider deletes the
// ENI it created; with a longer deadline the attach goes through.
func TestAttachDelay(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	c.SetAttachDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Provider().AllocENI(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("AllocENI: %v after %v", err, time.Since(start))
	}
	out, _ := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{})
	if len(out.NetworkInterfaces) != 1 {
		t.Fatalf("%d ENIs after the timed-out attach, want the primary only", len(out.NetworkInterfaces))
	}
	// The log ends with the attach, the provider's cleanup and our describe.
	calls := c.Calls()
	want := []Call{{API: "AttachNetworkInterface", Err: context.DeadlineExceeded.Error()}, {API: "DeleteNetworkInterface"}, {API: "DescribeNetworkInterfaces"}}
	if got := calls[len(calls)-3:]; !reflect.DeepEqual(got, want) {
		t.Errorf("log ends %+v, want %+v", got, want)
	}

	c.SetAttachDelay(30 * time.Millisecond)
	start = time.Now()
	eni, err := c.Provider().AllocENI(bg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("attach took %v, want at least the delay", d)
	}
	if eni.DeviceNumber != 1 {
		t.Errorf("ENI %+v", eni)
	}
}

func TestCancelledContext(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{}); !errors.Is(err, context.Canceled) {
		t.Errorf("EC2: %v", err)
	}
	if _, err := c.Instance(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("IMDS: %v", err)
	}
}
