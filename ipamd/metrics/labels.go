package metrics

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/smithy-go"
)

// Label values outside the sets below are recorded as LabelOther. Every
// distinct label value is a time series kept for the life of the process,
// so a caller passing a free-form string (an error message, a pod name)
// must not be able to grow the series without bound.
const LabelOther = "other"

// Results of a request, checkpoint write, reconciler run or pool action
// that has no finer outcome.
const (
	ResultSuccess = "success"
	ResultError   = "error"
)

// requestResults are the outcome words ipamd's AddNetwork and DelNetwork
// handlers log (ipamd/handler.go and ipamd/branch.go). AddRequest and
// DelRequest accept the same set: the words do not overlap in meaning, and
// one set keeps the label's cardinality obvious.
var requestResults = setOf(
	"assigned",
	"released",
	"handed-over",
	"invalid-request",
	"no-available-ip",
	"unknown-pod",
	"not-owner",
	"wrong-client-version",
	"error",
	"branch-eni-assigned",
	"branch-eni-released",
	"pod-eni-lookup-failed",
	"invalid-pod-eni",
	"no-trunk",
	"pod-gone",
	"checkpoint-failed",
)

// ReasonUnspecified is the reason label of a DelNetwork request that
// carried no Reason (an old plugin).
const ReasonUnspecified = "unspecified"

// delReasons are the DelNetworkRequest Reason values the plugin sends
// (plugin/add.go, the reference's values).
var delReasons = setOf("PodDeleted", "SetupNSFailed")

// reconcilerKinds are what the reconciler removes: addresses it released
// for pods that no longer exist, and leaked policy-routing rules by their
// selector (to the pod, from the pod, incoming interface).
var reconcilerKinds = setOf("released", "rule-to-pod", "rule-from-pod", "rule-iif")

// poolActions are the warm-pool manager's EC2-backed steps.
var poolActions = setOf(
	"alloc-eni",
	"free-eni",
	"assign-ips",
	"unassign-ips",
	"assign-prefixes",
	"unassign-prefixes",
)

// ec2APIs are the EC2 operations ipamd calls (cloud.EC2,
// docs/reference-facts.md#ec2-calls), named as in the SDK.
var ec2APIs = setOf(
	"CreateNetworkInterface",
	"AttachNetworkInterface",
	"ModifyNetworkInterfaceAttribute",
	"DetachNetworkInterface",
	"DeleteNetworkInterface",
	"DescribeNetworkInterfaces",
	"AssignPrivateIpAddresses",
	"UnassignPrivateIpAddresses",
	"AssignIpv6Addresses",
	"UnassignIpv6Addresses",
	"DescribeInstances",
	"DescribeInstanceTypes",
	"DescribeSubnets",
	"CreateTags",
)

// Error codes for EC2 failures that carry no AWS error code.
const (
	ErrorCodeCanceled = "Canceled"         // the caller's context was canceled
	ErrorCodeDeadline = "DeadlineExceeded" // the caller's context timed out
	ErrorCodeUnknown  = "Unknown"          // transport or SDK error without a code
)

// maxErrorCodes bounds the distinct AWS error codes recorded. EC2 has a
// few hundred codes and the SDK cannot list them, so a fixed allow-list
// would hide the one that matters; instead the first codes seen are kept
// (a node sees a handful: throttling, subnet full, limits) and anything
// beyond the bound is LabelOther.
const maxErrorCodes = 32

func setOf(words ...string) map[string]bool {
	s := make(map[string]bool, len(words))
	for _, w := range words {
		s[w] = true
	}
	return s
}

// oneOf returns v if the set allows it, LabelOther otherwise.
func oneOf(set map[string]bool, v string) string {
	if set[v] {
		return v
	}
	return LabelOther
}

func resultOf(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultSuccess
}

// errorCodes remembers which AWS error codes have been given a series.
type errorCodes struct {
	mu   sync.Mutex
	seen map[string]bool
}

// label returns the error-code label for err.
func (c *errorCodes) label(err error) string {
	code := errorCode(err)
	if !plausibleCode(code) {
		return LabelOther
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[code] {
		return code
	}
	if len(c.seen) >= maxErrorCodes {
		return LabelOther
	}
	if c.seen == nil {
		c.seen = make(map[string]bool)
	}
	c.seen[code] = true
	return code
}

// errorCode extracts the AWS error code (e.g. RequestLimitExceeded) from an
// SDK error, which wraps the API error in operation and retry errors.
func errorCode(err error) string {
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode() != "":
		return apiErr.ErrorCode()
	case errors.Is(err, context.DeadlineExceeded):
		return ErrorCodeDeadline
	case errors.Is(err, context.Canceled):
		return ErrorCodeCanceled
	default:
		return ErrorCodeUnknown
	}
}

// plausibleCode reports whether code looks like an AWS error code
// (alphanumerics and dots, e.g. InvalidParameterValue or
// Client.UnauthorizedOperation). A service returning something else (an
// HTML page from a proxy, a message instead of a code) must not become a
// label value.
func plausibleCode(code string) bool {
	if code == "" || len(code) > 64 {
		return false
	}
	for _, r := range code {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.':
		default:
			return false
		}
	}
	return true
}
