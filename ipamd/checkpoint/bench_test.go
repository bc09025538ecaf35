package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkCommit measures Commits per second with a node's worth of pods
// (100 allocations) as the given number of callers (concurrent pod ADDs
// and DELs) commit at once; one op is one Commit. writes/commit shows how
// many callers each fsynced write served.
func BenchmarkCommit(b *testing.B) {
	for _, mode := range []struct {
		name    string
		perCall bool
	}{{name: "group"}, {name: "per-call", perCall: true}} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode.name, callers), func(b *testing.B) {
				benchmarkCommit(b, mode.perCall, callers)
			})
		}
	}
}

func benchmarkCommit(b *testing.B, perCall bool, callers int) {
	var state podState
	for i := range 100 {
		state.add(podAllocation(i))
	}
	path := filepath.Join(b.TempDir(), "ipam.json")
	var counter writeCounter
	w := NewWriter(path, state.snapshot, WriterOptions{PerCallSync: perCall, OnWrite: counter.onWrite})
	defer w.Close()
	if err := w.Commit(context.Background()); err != nil { // the file exists, as on a running node
		b.Fatal(err)
	}
	counter.writes.Store(0)

	var claimed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for claimed.Add(1) <= int64(b.N) {
				if err := w.Commit(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()

	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(counter.writes.Load())/float64(b.N), "writes/commit")
}
