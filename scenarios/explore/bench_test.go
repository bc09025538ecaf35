package explore

import (
	"testing"

	"github.com/vpccni/vpccni/scenarios/spec"
)

// BenchmarkSchedules reports how many schedules of the eviction template
// the model runs per second (one worker per core).
//
//	go test -run x -bench Schedules ./scenarios/explore/
func BenchmarkSchedules(b *testing.B) {
	t, err := spec.Load("../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		b.Fatal(err)
	}
	scheds, err := Enumerate(t, Options{Modes: []string{"ipv4"}, Policies: []string{"default"}, Memories: []string{"kept"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	n := 0
	for b.Loop() {
		s := scheds[n%len(scheds)]
		if _, err := Run(t, []Schedule{s}, Options{Workers: 1}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "schedules/s")
}
