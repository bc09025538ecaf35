package cloud_test

import (
	"reflect"
	"testing"

	"github.com/vpccni/vpccni/cloud"
)

func TestLimitsTable(t *testing.T) {
	want := map[string]cloud.Limits{
		"t3.medium":   {ENIs: 3, IPv4PerENI: 6, IPv6: true},
		"m5.large":    {ENIs: 3, IPv4PerENI: 10, IPv6: true, Trunk: true},
		"m5.4xlarge":  {ENIs: 8, IPv4PerENI: 30, IPv6: true, Trunk: true},
		"c5.18xlarge": {ENIs: 15, IPv4PerENI: 50, IPv6: true, Trunk: true},
	}
	for typ, l := range want {
		if got, ok := cloud.LimitsOf(typ); !ok || got != l {
			t.Errorf("LimitsOf(%s) = %+v %v, want %+v", typ, got, ok, l)
		}
	}
	if _, ok := cloud.LimitsOf("x1.banana"); ok {
		t.Error("LimitsOf knows x1.banana")
	}
	if got := cloud.KnownTypes(); !reflect.DeepEqual(got, []string{"c5.18xlarge", "m5.4xlarge", "m5.large", "t3.medium"}) {
		t.Errorf("KnownTypes() = %v", got)
	}
}
