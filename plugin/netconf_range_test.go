package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// TestNetConfNumericRanges: every numeric netconf field is checked against
// its documented range; out of range is code 7 naming the field, the value
// and the range, and the bounds themselves are accepted.
func TestNetConfNumericRanges(t *testing.T) {
	for _, c := range []struct {
		field, value string
		ok           bool
	}{
		{"mtu", "575", false}, {"mtu", "576", true}, {"mtu", "9001", true}, {"mtu", "9002", false}, {"mtu", "-1", false},
		{"ipamdTimeout", "0s", false}, {"ipamdTimeout", "-1s", false}, {"ipamdTimeout", "999us", false},
		{"ipamdTimeout", "1ms", true}, {"ipamdTimeout", "5m", true}, {"ipamdTimeout", "5m1s", false},
	} {
		_, err := LoadNetConf(netconf(t, map[string]any{c.field: c.value}))
		if c.ok {
			if err != nil {
				t.Errorf("%s %q refused: %v", c.field, c.value, err)
			}
			continue
		}
		e, isCNI := err.(*types.Error)
		if !isCNI || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Details, c.field) || !strings.Contains(e.Details, c.value) {
			t.Errorf("%s %q: %v, want code 7 naming the field and the value", c.field, c.value, err)
			continue
		}
		want := map[string]string{"mtu": "between 576 and 9001", "ipamdTimeout": "between " + MinIpamdTimeout.String() + " and " + (5 * time.Minute).String()}[c.field]
		if !strings.Contains(e.Details, want) {
			t.Errorf("%s %q: %q does not give the range %q", c.field, c.value, e.Details, want)
		}
	}
}
