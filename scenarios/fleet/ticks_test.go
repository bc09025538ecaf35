package fleet

import (
	"encoding/json"
	"testing"

	"github.com/vpccni/vpccni/scenarios/spec"
)

// The ticks the nodes skip (engine: nextTickAt, ipamd: Daemon.LoopsDue)
// are ones on which ipamd's loops would have done nothing: the 20-node
// hour gives the same result byte for byte with every tick run, under
// vpccni's flow and under the pre-#2048 one, whose leaks keep the step
// checks busy. Skipping is what lets a node sleep from one event to the
// next instead of waking 17,280 times a day.
func TestSkippedTicksChangeNothing(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/autoscaler-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []string{"default", "ref-v1.11"} {
		skipped, err := json.Marshal(run(t, f, pol, Options{}))
		if err != nil {
			t.Fatal(err)
		}
		every, err := json.Marshal(run(t, f, pol, Options{EveryTick: true}))
		if err != nil {
			t.Fatal(err)
		}
		if string(skipped) != string(every) {
			t.Errorf("%s: skipping idle ticks changed the result:\nskipped: %s\nevery tick: %s", pol, skipped, every)
		}
	}
}
