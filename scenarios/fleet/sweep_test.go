package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// A fleet of 2.5 simulated hours without drains: its nodes live from the
// first minute to the last, so a planted object stays on one node.
const steady = `
name: steady
seed: 11
duration: 2h30m
nodeGroups:
  - name: ng
    nodes: 3
    maxPods: 16
    node: {instanceType: m5.large, warmPool: {warmIPTarget: 2, minimumIPTarget: 4}}
pods: {perNode: 8, createPerHour: 60, deletePerHour: 60}
expect: {default: [clean]}
`

// plant adds a veth no pod owns to the first node at from, and removes it
// at until (0: never): only the hourly sweeps read a node's links.
func plant(t *testing.T, from, until time.Duration) func(*World) {
	added, removed := false, false
	return func(w *World) {
		if len(w.nodes) == 0 {
			return
		}
		k := w.nodes[0].Kernel()
		switch {
		case !added && w.now >= from:
			added = true
			if err := k.AddVeth(kernel.VethSpec{Name: "eniplanted0001", MTU: 9001, PeerName: "eniplanted0002"}); err != nil {
				t.Error(err)
			}
		case added && !removed && until > 0 && w.now >= until:
			removed = true
			if err := k.LinkDel("eniplanted0001"); err != nil { // its peer goes with it
				t.Error(err)
			}
		}
	}
}

// TestHourlySweepFindsWhatPersists: a leaked object on a node counts at
// the second hourly sweep that sees it (t=2h, not only at the end); one
// that is gone before the second sweep is a node caught mid-work, never
// reported.
func TestHourlySweepFindsWhatPersists(t *testing.T) {
	f, err := spec.ParseFleet([]byte(steady))
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, f, "default", Options{}); len(r.Findings) != 0 {
		t.Fatalf("unbroken: want clean, got %v", r.Findings)
	}
	r := run(t, f, "default", Options{Break: plant(t, 10*time.Minute, 0)})
	var leak *Finding
	for i, fd := range r.Findings {
		if fd.Kind == invariant.Leak && strings.Contains(fd.What, "eniplanted0001") {
			leak = &r.Findings[i]
		}
	}
	if leak == nil {
		t.Fatalf("the planted veth is not found: %v", r.Findings)
	}
	if leak.At != 2*time.Hour {
		t.Errorf("the planted veth is found at t=%s, want t=2h (the second sweep that saw it)", leak.At)
	}
	r = run(t, f, "default", Options{Break: plant(t, 10*time.Minute, 90*time.Minute)})
	if len(r.Findings) != 0 {
		t.Errorf("a veth seen by one sweep only is reported: %v", r.Findings)
	}
}
