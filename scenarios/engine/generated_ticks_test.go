package engine_test

import (
	"testing"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// The library's scenarios (TestSkippedTicksChangeNoScenario) do not hold
// every way into a skipped tick: the explorer's generated timelines give
// kubelet ADDs to retry and slow ADDs long after the last tick that ran.
// Two such ways once hung a run (settle advanced to a tick already
// skipped, forever) and moved the clock back (a slow ADD ran the skipped
// ticks). The same timelines, with every tick run and with the idle ones
// skipped, give the same result.
func TestSkippedTicksChangeNoGeneratedTimeline(t *testing.T) {
	const seed = 20261203 // the explorer's fixed budget's
	// The first 40 schedules (ten per mode), and 156, the one that hung
	// (found by the fixed budget timing out in CI).
	var schedules []int
	for i := range 40 {
		schedules = append(schedules, i)
	}
	for _, i := range append(schedules, 156) {
		mode := spec.KnownModes[i%len(spec.KnownModes)]
		s := explore.Generate(seed, i, mode)
		s.Expect = map[string]spec.Verdicts{policy.Default{}.Name(): {All: "clean"}}
		var got [2]string
		for k, every := range []bool{false, true} {
			res, err := engine.Run(s, mode, policy.Default{}, engine.Options{Tolerant: true, EveryTick: every})
			if err != nil {
				t.Fatalf("schedule %d (%s), every tick %v: %v", i, mode, every, err)
			}
			if got[k], err = engine.Comparable(res); err != nil {
				t.Fatal(err)
			}
		}
		if got[0] != got[1] {
			t.Errorf("schedule %d of seed %d in %s: skipping idle ticks changed the result:\n%s", i, seed, mode, engine.FirstDifference(got[0], got[1]))
		}
	}
}
