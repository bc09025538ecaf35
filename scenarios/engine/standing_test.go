package engine

import (
	"strings"
	"testing"

	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// A step violation that lasts is one finding, made when it starts; once
// it has ended, the same violation again is a new one. Under the
// reference's flow ipamd, restarted blind, gives api-0 the address web-0
// still holds; the double assignment lasts until api-0 is deleted (once,
// not once per round of ipamd's loops: there were 26), and starts again
// when api-0 comes back to the same address.
func TestLastingStepViolationIsOneFinding(t *testing.T) {
	s, err := spec.Parse([]byte(`
name: double-assign-twice
modes: [ipv4]
node: {instanceType: m5.large}
pods:
  - {name: default/web-0, device: 1}
  - {name: default/api-0, device: 1}
timeline:
  - add: [web-0]
  - restart: ipamd
    memory: lost
  - add: [api-0]                 # web-0's address: DOUBLE-ASSIGN starts
  - wait: 2m                     # it lasts
  - delete: [api-0]              # it ends
  - wait: 40s
  - add: [api-0]                 # the same address again: it starts again
  - wait: 1m
expect:
  ref-v1.11: double-assign
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.ByName("ref-v1.11")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s, "ipv4", p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var starts []string
	for _, v := range res.Violations {
		if v.Kind == "DOUBLE-ASSIGN" && strings.HasPrefix(v.What, "at t=") {
			starts = append(starts, v.What)
		}
	}
	if len(starts) != 2 {
		t.Fatalf("want the double assignment found twice, when it started and when it started again; found %d times:\n%s", len(starts), strings.Join(starts, "\n"))
	}
}
