package ipamd

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vpccni/vpccni/cloud/memory"
)

// BenchmarkAddNetwork measures AddNetwork (with its DelNetwork, so the
// pool never runs dry) over the real socket with the checkpoint on disk,
// at 1, 16 and 64 concurrent callers, with concurrent calls sharing one
// checkpoint write (group commit) and with one write and fsync per call.
// One op is one ADD+DEL pair; "writes/op" is checkpoint writes per pair.
//
//	go test -run x -bench AddNetwork -benchtime 2000x ./ipamd/
func BenchmarkAddNetwork(b *testing.B) {
	for _, mode := range []struct {
		name    string
		perCall bool
	}{{"group-commit", false}, {"fsync-per-call", true}} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode.name, callers), func(b *testing.B) {
				benchAddNetwork(b, mode.perCall, callers)
			})
		}
	}
}

func benchAddNetwork(b *testing.B, perCall bool, callers int) {
	dir, err := os.MkdirTemp("", "ipamd-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ipamd.sock")
	c, err := memory.New("c5.18xlarge")
	if err != nil {
		b.Fatal(err)
	}
	var writes atomic.Int64
	d, err := New(Config{SocketPath: sock, Inventory: c, Checkpoint: filepath.Join(dir, "ipam.json")}, WithPerCallSync(perCall))
	if err != nil {
		b.Fatal(err)
	}
	d.onCheckpointWrite = func() { writes.Add(1) }
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	defer d.Stop()
	writes.Store(0) // the start's own write
	cl := client(b, sock)
	ctx := b.Context()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range callers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if rep, err := cl.AddNetwork(ctx, addReq(id)); err != nil || !rep.Success {
					b.Errorf("add %s: %v %v", id, rep, err)
					return
				}
				if _, err := cl.DelNetwork(ctx, delReq(id)); err != nil {
					b.Errorf("del %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}
