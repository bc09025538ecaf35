package memory

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/vpccni/vpccni/cloud"
)

// Fault makes the next Times calls of an API fail with Code (an EC2 error
// code such as RequestLimitExceeded). Times < 0 fails every call until
// ClearFaults.
type Fault struct {
	Code  string
	Times int
}

// Call is one EC2 call the model answered: its API name and the error
// code it returned ("" on success; the error's text when it was not an
// EC2 error, such as a cancelled context).
type Call struct {
	API string
	Err string
}

// ec2APIs are the APIs a fault can name: cloud.EC2's methods.
var ec2APIs = []string{
	"CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute",
	"DetachNetworkInterface", "DeleteNetworkInterface", "DescribeNetworkInterfaces",
	"AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "AssignIpv6Addresses",
	"UnassignIpv6Addresses", "DescribeInstances", "DescribeInstanceTypes", "DescribeSubnets",
	"CreateTags",
}

// InjectFault sets the fault of one EC2 API, replacing any earlier one;
// Times 0 removes it. It panics on an API cloud.EC2 does not have, since
// a misspelt name would otherwise inject nothing and the test would pass
// for the wrong reason.
func (c *Cloud) InjectFault(api string, f Fault) {
	if !slices.Contains(ec2APIs, api) {
		panic(fmt.Sprintf("memory cloud: InjectFault on %q, which is not an EC2 API of cloud.EC2", api))
	}
	c.vpc.mu.Lock()
	defer c.vpc.mu.Unlock()
	if f.Times == 0 {
		delete(c.faults, api)
		return
	}
	c.faults[api] = f
}

// ClearFaults removes every fault.
func (c *Cloud) ClearFaults() {
	c.vpc.mu.Lock()
	defer c.vpc.mu.Unlock()
	clear(c.faults)
}

// SetAttachDelay makes every AttachNetworkInterface take d before it
// commits, or fail with the context's error if the context ends first
// (nothing is attached then), as a slow attachment does.
func (c *Cloud) SetAttachDelay(d time.Duration) {
	c.vpc.mu.Lock()
	defer c.vpc.mu.Unlock()
	c.attachDelay = d
}

// Calls returns the EC2 calls answered so far, oldest first. IMDS reads
// are not EC2 calls and are not in it.
func (c *Cloud) Calls() []Call {
	c.vpc.mu.Lock()
	defer c.vpc.mu.Unlock()
	return slices.Clone(c.calls)
}

// call runs one EC2 API under the model's lock: it fails the call with
// the context's error, the instance's termination or the injected fault
// first, runs op otherwise, and logs the outcome.
func call[Out any](ctx context.Context, c *Cloud, api string, op func() (Out, error)) (Out, error) {
	c.vpc.mu.Lock()
	defer c.vpc.mu.Unlock()
	var out Out
	err := ctx.Err()
	if err == nil && c.terminated {
		// A late call of the gone node's ipamd fails cleanly.
		err = apiError(api, codeInstanceNotFound, "The instance ID '%s' does not exist (terminated)", c.instanceID)
	}
	if err == nil {
		err = c.takeFault(api)
	}
	if err == nil {
		out, err = op()
	}
	c.calls = append(c.calls, Call{API: api, Err: errorText(err)})
	return out, err
}

// takeFault returns the injected error of api, counting the call against
// the fault. The caller holds c.vpc.mu.
func (c *Cloud) takeFault(api string) error {
	f, ok := c.faults[api]
	if !ok {
		return nil
	}
	if f.Times > 0 {
		if f.Times--; f.Times == 0 {
			delete(c.faults, api)
		} else {
			c.faults[api] = f
		}
	}
	return apiError(api, f.Code, "injected fault")
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	if code := cloud.ErrorCode(err); code != "" {
		return code
	}
	return err.Error()
}

// apiError is an EC2 error as aws-sdk-go-v2 returns it: the API error with
// its code, inside the operation error naming the call.
func apiError(api, code, format string, args ...any) error {
	return &smithy.OperationError{
		ServiceID:     "EC2",
		OperationName: api,
		Err:           &smithy.GenericAPIError{Code: code, Message: fmt.Sprintf(format, args...)},
	}
}

// imdsUnreachable is what IMDS reads fail with on a terminated instance:
// no HTTP answer at all (not a 404, which means an absent key).
func imdsUnreachable(instanceID, path string) error {
	return &smithy.OperationError{
		ServiceID:     "ec2imds",
		OperationName: "GetMetadata",
		Err:           fmt.Errorf("request to EC2 IMDS failed: instance %s is terminated, nothing answers %s", instanceID, path),
	}
}

// metadataNotFound is IMDS's answer for a key that does not exist, as
// imds.Client returns it: an HTTP 404 response error.
func metadataNotFound(path string) error {
	return &smithy.OperationError{
		ServiceID:     "ec2imds",
		OperationName: "GetMetadata",
		Err: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found"}},
			Err:      errors.New("request to EC2 IMDS failed: no key " + path),
		},
	}
}
