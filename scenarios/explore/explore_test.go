package explore

import (
	"path/filepath"
	"testing"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

func template(t *testing.T) *spec.Scenario {
	t.Helper()
	s, err := spec.Load("../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEnumerateReadsTheCode: the schedules name only registered points,
// the ones the template reaches, each occurrence of them.
func TestEnumerateReadsTheCode(t *testing.T) {
	scheds, err := Enumerate(template(t), Options{Modes: []string{"ipv4"}, Policies: []string{"default"},
		Actions: []failpoint.Action{failpoint.Crash}, Memories: []string{"kept"}})
	if err != nil {
		t.Fatal(err)
	}
	points := map[string]int{}
	for _, s := range scheds {
		if !failpoint.Known(failpoint.Name(s.Point)) {
			t.Fatalf("unknown point %s", s.Point)
		}
		points[s.Point] = max(points[s.Point], s.Occurrence)
	}
	for _, want := range []string{"driver/del-rule-to-pod", "driver/create-veth", "plugin/del/before-release", "ipamd/add/before-reply"} {
		if points[want] == 0 {
			t.Errorf("the eviction template never reaches %s: %v", want, points)
		}
	}
	if points["driver/create-veth"] < 3 {
		t.Errorf("create-veth reached %d times; the template adds four pods", points["driver/create-veth"])
	}
}

// simple is a pod on a secondary ENI added and deleted, with a pod that
// stays, while ipamd is up: a DEL that crashes after the reference
// released the address is retried into "unknown pod".
const simple = `
name: add-delete
modes: [ipv4]
pods: [{name: default/web-0, device: 1}, {name: default/web-1, device: 1}]
timeline:
  - add: [web-0, web-1]
  - delete: [web-0]
  - settle: {}
expect: {default: clean}
`

// TestSpaceDefaultCleanLegacyLeaks: on the crashes of a small template
// vpccni's flow is clean and today's reference flow is not; a failure
// shrinks to a file that replays to the same verdict.
func TestSpaceDefaultCleanLegacyLeaks(t *testing.T) {
	tmpl, err := spec.Parse([]byte(simple))
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Modes: []string{"ipv4"}, Policies: []string{"default", "ref-current"},
		Actions: []failpoint.Action{failpoint.Crash}, Memories: []string{"kept"}}
	scheds, err := Enumerate(tmpl, opt)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(tmpl, scheds, opt)
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Matrix()
	if c := m["default"]["ipv4"]; len(c) != 1 || c["clean"] == 0 {
		t.Fatalf("default: %v", c)
	}
	if c := m["ref-current"]["ipv4"]; c["LEAK"] == 0 {
		t.Fatalf("ref-current never leaks on the slice: %v", c)
	}
	fails := rep.Failures()
	if len(fails) == 0 {
		t.Fatal("no failures to shrink")
	}
	o := fails[0]
	f, err := Shrink(tmpl, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Pods) != 1 {
		t.Errorf("the bystander pod was not shrunk away: %+v", f.Pods)
	}
	path, err := Write(t.TempDir(), f)
	if err != nil {
		t.Fatal(err)
	}
	back, err := spec.Load(path)
	if err != nil {
		t.Fatalf("the written file does not load: %v", err)
	}
	res, err := engine.Run(back, o.Mode, policy.RefCurrent, engine.Options{})
	if err != nil || !res.Match || res.Main != o.Verdict {
		t.Fatalf("%s replays to %s (match %v, err %v), want %s", filepath.Base(path), res.Main, res.Match, err, o.Verdict)
	}
}
