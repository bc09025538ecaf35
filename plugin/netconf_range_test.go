package plugin

import (
	"fmt"
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

// TestNetConfResultFormat: resultFormat is "reference" (also when left
// out) or "spec"; anything else is code 7 naming the field, the value and
// both allowed values, and LoadNetConf returns no configuration to act on.
func TestNetConfResultFormat(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"", ResultFormatReference}, {"reference", ResultFormatReference}, {"spec", ResultFormatSpec},
	} {
		extra := map[string]any{}
		if c.value != "" {
			extra["resultFormat"] = c.value
		}
		conf, err := LoadNetConf(netconf(t, extra))
		if err != nil || conf.ResultFormat != c.want {
			t.Errorf("resultFormat %q: %v, %+v; want %q", c.value, err, conf, c.want)
		}
	}
	for _, v := range []any{"Spec", "SPEC", " spec", "cni", "ref", "1", 1, true} {
		conf, err := LoadNetConf(netconf(t, map[string]any{"resultFormat": v}))
		if conf != nil {
			t.Errorf("resultFormat %v: a configuration was returned with the error %v", v, err)
		}
		e, isCNI := err.(*types.Error)
		if _, isString := v.(string); !isString {
			// Not a string at all: the JSON does not decode (code 6).
			if !isCNI || e.Code != types.ErrDecodingFailure {
				t.Errorf("resultFormat %v: %v, want code 6", v, err)
			}
			continue
		}
		if !isCNI || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Details, "resultFormat") ||
			!strings.Contains(e.Details, fmt.Sprintf("%q", v)) || !strings.Contains(e.Details, `"reference"`) || !strings.Contains(e.Details, `"spec"`) {
			t.Errorf("resultFormat %q: %v, want code 7 naming the field, the value and \"reference\" and \"spec\"", v, err)
		}
	}
}
