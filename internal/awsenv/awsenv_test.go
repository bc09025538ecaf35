package awsenv

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func env(kv ...string) Getenv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestBoolAsParseBool: every spelling strconv.ParseBool takes, the
// reference's default when unset or empty, and a value it cannot read is
// an error naming the variable and the value (the reference silently
// takes the default).
func TestBoolAsParseBool(t *testing.T) {
	for val, want := range map[string]bool{"1": true, "t": true, "T": true, "TRUE": true, "true": true, "True": true,
		"0": false, "f": false, "F": false, "FALSE": false, "false": false, "False": false} {
		got, err := Bool(env("ENABLE_IPv6", val), "ENABLE_IPv6")
		if err != nil || got != want {
			t.Errorf("ENABLE_IPv6=%q: %v, %v; want %v", val, got, err, want)
		}
	}
	for name, want := range map[string]bool{"ENABLE_IPv6": false, "ENABLE_IPv4": true, "AWS_VPC_CNI_NODE_PORT_SUPPORT": true} {
		for _, e := range []Getenv{env(), env(name, "")} {
			if got, err := Bool(e, name); err != nil || got != want {
				t.Errorf("%s unset or empty: %v, %v; want the default %v", name, got, err, want)
			}
		}
	}
	for _, bad := range []string{"yes", "on", "tru", " true"} {
		_, err := Bool(env("DISABLE_METRICS", bad), "DISABLE_METRICS")
		var e *Error
		if !errors.As(err, &e) || e.Name != "DISABLE_METRICS" || e.Value != bad || !strings.Contains(err.Error(), "DISABLE_METRICS") {
			t.Errorf("DISABLE_METRICS=%q: %v, want an error naming it", bad, err)
		}
	}
}

func TestIntAndStr(t *testing.T) {
	if n, err := Int(env(), "WARM_ENI_TARGET"); err != nil || n != 1 {
		t.Errorf("WARM_ENI_TARGET unset: %d, %v", n, err)
	}
	if n, err := Int(env("WARM_IP_TARGET", "7"), "WARM_IP_TARGET"); err != nil || n != 7 {
		t.Errorf("WARM_IP_TARGET=7: %d, %v", n, err)
	}
	if _, err := Int(env("WARM_IP_TARGET", "seven"), "WARM_IP_TARGET"); err == nil || !strings.Contains(err.Error(), `WARM_IP_TARGET="seven"`) {
		t.Errorf("WARM_IP_TARGET=seven: %v", err)
	}
	if s := Str(env(), "AWS_VPC_K8S_CNI_BACKING_STORE"); s != "/var/run/aws-node/ipam.json" {
		t.Errorf("default backing store %q", s)
	}
}

// TestReadAsWrongKindPanics: a read of an uncatalogued variable, or as
// another kind than catalogued, is a programming error found by the first
// test that makes it.
func TestReadAsWrongKindPanics(t *testing.T) {
	for _, read := range []func(){
		func() { _, _ = Bool(env(), "WARM_ENI_TARGET") },
		func() { _ = Str(env(), "NOT_A_VARIABLE") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			read()
		}()
	}
}

func findings(environ ...string) map[string]string {
	out := map[string]string{}
	for _, f := range Audit(environ) {
		out[f.Name] = f.Problem
	}
	return out
}

// TestAudit: a variable vpccni does not support is reported when set to
// anything but the reference's default (any spelling of a default switch
// is the default), a look-alike unknown variable is reported, others are
// not, and a default vpccni does not honour is reported whatever the value.
func TestAudit(t *testing.T) {
	got := findings("ENABLE_MULTI_NIC=true", "ENABLE_SUBNET_DISCOVERY=True", "ENABLE_IMDS_ONLY_MODE=0",
		"NETWORK_POLICY_ENFORCING_MODE=standard", "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=1", "WARM_ENI_TARGETS=2",
		"AWS_VPC_NEW_THING=x", "ENABLE_IPv6=true", "PATH=/bin", "VPCCNI_FAILPOINTS=", "AWS_VPC_K8S_CNI_EXTERNALSNAT=true",
		"AWS_EXTERNAL_SERVICE_CIDRS=10.9.0.0/16")
	want := map[string]string{
		"ENABLE_MULTI_NIC":                   "set but not supported: multi-NIC",
		"AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG": "set but not supported: custom networking",
		"WARM_ENI_TARGETS":                   "unknown",
		"AWS_VPC_NEW_THING":                  "unknown",
		"AWS_EXTERNAL_SERVICE_CIDRS":         "set but not supported yet",
	}
	for name, prefix := range want {
		if !strings.HasPrefix(got[name], prefix) {
			t.Errorf("%s: %q, want %q...", name, got[name], prefix)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s reported: %s", name, got[name])
		}
	}
	if f := findings(); len(f) != 0 {
		t.Errorf("an empty environment is reported: %v", f)
	}
}

// TestAuditDefaultGap: a variable whose default vpccni does not honour is
// reported unset or at its default, and not when set otherwise (no entry
// of the catalogue has such a gap now; one is added for the test).
func TestAuditDefaultGap(t *testing.T) {
	gap := Var{Name: "VPCCNI_TEST_GAP", Container: Node, Default: "true", Kind: KindBool, Status: Supported,
		Note: "test", DefaultGap: "the reference does something"}
	saved := catalogue
	catalogue = append(slices.Clone(catalogue), gap)
	index[gap.Name] = gap
	t.Cleanup(func() { catalogue = saved; delete(index, gap.Name) })
	for _, env := range [][]string{nil, {"VPCCNI_TEST_GAP=true"}, {"VPCCNI_TEST_GAP=1"}} {
		if got := findings(env...)[gap.Name]; !strings.HasPrefix(got, "at the reference's default") {
			t.Errorf("%v: %q, want it reported at the reference's default", env, got)
		}
	}
	if got := findings("VPCCNI_TEST_GAP=false")[gap.Name]; got != "" {
		t.Errorf("set to false: reported %q", got)
	}
}

// TestCatalogue: every entry is whole, and its default reads as its kind.
func TestCatalogue(t *testing.T) {
	for _, v := range All() {
		if v.Name == "" || v.Note == "" || (v.Container != Node && v.Container != Init) {
			t.Errorf("incomplete: %+v", v)
		}
		if v.Default == "" {
			continue
		}
		var err error
		switch v.Kind {
		case KindBool:
			_, err = Bool(env(), v.Name)
		case KindInt:
			_, err = Int(env(), v.Name)
		}
		if err != nil {
			t.Errorf("%s: default %q: %v", v.Name, v.Default, err)
		}
	}
}

func TestTags(t *testing.T) {
	for val, want := range map[string]int{"": 0, "{}": 0, `{"team":"net","cost-center":"42"}`: 2} {
		tags, err := Tags(env("ADDITIONAL_ENI_TAGS", val), "ADDITIONAL_ENI_TAGS")
		if err != nil || len(tags) != want {
			t.Errorf("%q: %v, %v", val, tags, err)
		}
	}
	for _, bad := range []string{`{"team":1}`, `["team"]`, `{"node.k8s.amazonaws.com/instance_id":"i-1"}`, `{"aws:x":"y"}`, `{"":"y"}`, "team=net"} {
		if _, err := Tags(env("ADDITIONAL_ENI_TAGS", bad), "ADDITIONAL_ENI_TAGS"); err == nil || !strings.Contains(err.Error(), "ADDITIONAL_ENI_TAGS=") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}

// TestMTU: the default, the bounds of each family inclusive, and a value
// out of range or not a number refused with the variable, the value and
// the range.
func TestMTU(t *testing.T) {
	if n, err := MTU(env(), "AWS_VPC_ENI_MTU", false); n != 9001 || err != nil {
		t.Errorf("unset: %d, %v; want the default 9001", n, err)
	}
	ok := []struct {
		val  string
		ipv6 bool
	}{{"576", false}, {"9001", false}, {"1500", false}, {"1280", true}, {"9001", true}}
	for _, c := range ok {
		if n, err := MTU(env("POD_MTU", c.val), "POD_MTU", c.ipv6); err != nil || n <= 0 {
			t.Errorf("POD_MTU=%s ipv6=%v: %d, %v; want it taken", c.val, c.ipv6, n, err)
		}
	}
	bad := []struct {
		val, want string
		ipv6      bool
	}{{"575", "576 to 9001 on an IPv4", false}, {"9002", "576 to 9001", false}, {"1279", "1280 to 9001 on an IPv6", true},
		{"0", "576 to 9001", false}, {"-1", "576", false}, {"jumbo", "whole number", false}}
	for _, c := range bad {
		_, err := MTU(env("AWS_VPC_ENI_MTU", c.val), "AWS_VPC_ENI_MTU", c.ipv6)
		var e *Error
		if !errors.As(err, &e) || e.Name != "AWS_VPC_ENI_MTU" || e.Value != c.val || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AWS_VPC_ENI_MTU=%s ipv6=%v: %v; want an error naming it and %q", c.val, c.ipv6, err, c.want)
		}
	}
}
