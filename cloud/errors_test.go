package cloud_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vpccni/vpccni/cloud"
)

func TestErrorClassification(t *testing.T) {
	type class struct{ throttled, full, notFound bool }
	for code, want := range map[string]class{
		"RequestLimitExceeded":               {throttled: true},
		"Throttling":                         {throttled: true},
		"InsufficientFreeAddressesInSubnet":  {full: true},
		"InsufficientCidrBlocks":             {full: true},
		"InvalidNetworkInterfaceID.NotFound": {notFound: true},
		"InvalidNetworkInterface.InUse":      {},
		"PrivateIpAddressLimitExceeded":      {},
	} {
		// Wrapped twice, as the provider and ipamd do.
		err := fmt.Errorf("ipamd: %w", fmt.Errorf("AssignPrivateIpAddresses on eni-1: %w", apiErr(code)))
		got := class{cloud.IsThrottled(err), cloud.IsSubnetFull(err), cloud.IsNotFound(err)}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", code, got, want)
		}
		if cloud.ErrorCode(err) != code {
			t.Errorf("ErrorCode = %q, want %q", cloud.ErrorCode(err), code)
		}
	}
	plain := errors.New("RequestLimitExceeded") // the text alone is not an API error
	if cloud.IsThrottled(plain) || cloud.IsSubnetFull(nil) || cloud.IsNotFound(nil) || cloud.ErrorCode(plain) != "" {
		t.Error("classified an error without an API error inside")
	}
}
