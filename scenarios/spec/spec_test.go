package spec

import (
	"strings"
	"testing"
)

const good = `
name: t
modes: [ipv4]
pods: [{name: default/web-0, device: 1}]
timeline:
  - add: [web-0]
  - delete: [web-0]
  - settle: {}
expect: {default: clean}
`

func TestParseGood(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeline[0].Add[0].Name != "default/web-0" || s.Node.InstanceType != "m5.large" || s.Node.KubeletRetries != 5 {
		t.Fatalf("%+v", s)
	}
}

// TestParseBad: each malformed file gets a precise message.
func TestParseBad(t *testing.T) {
	cases := map[string]string{
		"unknown key":     strings.Replace(good, "modes:", "mode:", 1),
		"unknown mode":    strings.Replace(good, "[ipv4]", "[ipv5]", 1),
		"bad pod name":    strings.Replace(good, "default/web-0", "Web_0", 1),
		"undeclared pod":  strings.Replace(good, "delete: [web-0]", "delete: [web-9]", 1),
		"two fields":      strings.Replace(good, "- settle: {}", "- {settle: {}, evict: aws-node}", 1),
		"bad verdict":     strings.Replace(good, "default: clean", "default: fine", 1),
		"no expect":       strings.Replace(good, "expect: {default: clean}", "", 1),
		"bad duration":    strings.Replace(good, "- settle: {}", "- wait: soon", 1),
		"evict what":      strings.Replace(good, "- settle: {}", "- evict: kube-proxy", 1),
		"vague memory":    strings.Replace(good, "- settle: {}", "- {cancel-eviction: aws-node, memory: some}", 1),
		"memory alone":    strings.Replace(good, "- settle: {}", "- {wait: 1s, memory: kept}", 1),
		"restart what":    strings.Replace(good, "- settle: {}", "- restart: kubelet", 1),
		"fault w/o code":  strings.Replace(good, "- settle: {}", "- ec2-fault: {api: AssignPrivateIpAddresses, times: 2}", 1),
		"glob nothing":    strings.Replace(good, "- add: [web-0]", "- add: [nope-*]", 1),
		"fresh no pool":   strings.Replace(good, "name: t", "node: {start: fresh}\nname: t", 1),
		"count range":     strings.Replace(good, "device: 1", "device: 1, count: 1001", 1),
		"other w/o reuse": strings.Replace(good, "- add: [web-0]", "- add: [{name: default/x, node: other}]", 1),
		"not yaml":        "name: [",
		"device range":    strings.Replace(good, "device: 1", "device: 99", 1),
		"limit w/o leak":  strings.Replace(good, "name: t", "name: t\nknownLimit: none really", 1),
		"no such point":   strings.Replace(good, "- settle: {}", "- failpoint: {name: driver/no-such-step, action: crash}", 1),
	}
	for name, in := range cases {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if err.Error() == "" {
			t.Errorf("%s: empty message", name)
		}
	}
}

// TestFailpointNames: a failpoint of this build is accepted, any other
// name is refused with the same message the engine's check gave.
func TestFailpointNames(t *testing.T) {
	in := strings.Replace(good, "- settle: {}", "- failpoint: {name: ipamd/add/before-reply, action: crash}", 1)
	if _, err := Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	_, err := Parse([]byte(strings.Replace(in, "ipamd/add/before-reply", "ipamd/add/nowhere", 1)))
	if want := `timeline[2]: failpoint "ipamd/add/nowhere" is not a failpoint of this build (replay failpoints lists them)`; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestExpectPerMode(t *testing.T) {
	in := strings.Replace(good, "modes: [ipv4]", "modes: [ipv4, ipv6]", 1)
	in = strings.Replace(in, "expect: {default: clean}", "expect: {default: clean, ref-v1.11: {ipv4: leak, ipv6: clean}}", 1)
	s, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Expected("ref-v1.11", "ipv4"); v != "leak" {
		t.Fatalf("ipv4: %q", v)
	}
	if v, _ := s.Expected("default", "ipv6"); v != "clean" {
		t.Fatalf("ipv6: %q", v)
	}
	for name, bad := range map[string]string{
		"mode missing": strings.Replace(in, "ipv6: clean}", "}", 1),
		"foreign mode": strings.Replace(in, "ipv6: clean}", "ipv6: clean, branch-eni-strict: leak}", 1),
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
