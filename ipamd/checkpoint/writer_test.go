package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// podState stands in for ipamd's datastore: callers change it under its
// lock, then Commit; the Writer snapshots it.
type podState struct {
	mu     sync.Mutex
	allocs []Allocation
}

// podAllocation is pod i's allocation: its own key and address.
func podAllocation(i int) Allocation {
	return Allocation{
		NetworkName:         "aws-cni",
		ContainerID:         fmt.Sprintf("sandbox-%04d", i),
		IfName:              "eth0",
		IPv4:                netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String(),
		AllocationTimestamp: int64(i),
		Metadata:            Metadata{K8SPodNamespace: "default", K8SPodName: fmt.Sprintf("pod-%d", i), InterfacesCount: 1},
	}
}

func (s *podState) add(a Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocs = append(s.allocs, a)
}

func (s *podState) snapshot() File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return File{Version: Version, Allocations: append([]Allocation(nil), s.allocs...)}
}

// writeCounter counts writes through WriterOptions.OnWrite.
type writeCounter struct{ writes, failures atomic.Int64 }

func (c *writeCounter) onWrite(_ time.Duration, err error) {
	c.writes.Add(1)
	if err != nil {
		c.failures.Add(1)
	}
}

// gate holds the first write a Writer makes: its snapshot is taken, then
// the write blocks until open is called, standing for a write that has
// started and is still running. Tests defer open after Close so that a
// failing test does not leave Close waiting forever.
type gate struct {
	entered  chan struct{}
	released chan struct{}
	calls    atomic.Int64
	once     sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), released: make(chan struct{})}
}

// wrap returns snapshot with the gate in front of its first call.
func (g *gate) wrap(snapshot func() File) func() File {
	return func() File {
		f := snapshot()
		if g.calls.Add(1) == 1 {
			close(g.entered)
			<-g.released
		}
		return f
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.released) }) }

// waitEntered waits until the first write is running.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	receive(t, g.entered, "the first write to start")
}

// receive waits for a value from ch, failing the test rather than hanging
// it when a broken Writer never answers.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("gave up after 10s waiting for %s", what)
	}
	panic("unreachable")
}

// waitForPending waits until n Commits are queued for the next write.
func waitForPending(t *testing.T, w *Writer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		queued := 0
		if w.pending != nil {
			queued = w.pending.callers
		}
		w.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Commits queued for the next write after 10s, want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// holds reports whether the checkpoint at path has allocation a.
func holds(t *testing.T, path string, a Allocation) bool {
	t.Helper()
	f, err := Read(path)
	if err != nil {
		t.Errorf("Read: %v", err)
		return false
	}
	for _, b := range f.Allocations {
		if b == a {
			return true
		}
	}
	return false
}

func TestWriterConcurrentCommitsAreDurable(t *testing.T) {
	const callers = 64
	for _, tt := range []struct {
		name      string
		perCall   bool
		maxWrites int64
		minWrites int64
	}{
		// Released together, the callers pile up behind the first write;
		// a handful of writes is typical, a quarter is already far off.
		{name: "group", maxWrites: callers / 4, minWrites: 1},
		{name: "per-call", perCall: true, maxWrites: callers, minWrites: callers},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ipam.json")
			var state podState
			var counter writeCounter
			w := NewWriter(path, state.snapshot, WriterOptions{PerCallSync: tt.perCall, OnWrite: counter.onWrite})
			defer w.Close()

			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					<-start
					mine := podAllocation(i)
					state.add(mine)
					if err := w.Commit(context.Background()); err != nil {
						t.Errorf("caller %d: Commit: %v", i, err)
						return
					}
					if !holds(t, path, mine) {
						t.Errorf("caller %d: Commit returned but its allocation is not in the file", i)
					}
				})
			}
			close(start)
			wg.Wait()

			writes := counter.writes.Load()
			t.Logf("%d Commits, %d writes", callers, writes)
			if writes < tt.minWrites || writes > tt.maxWrites {
				t.Errorf("%d writes for %d Commits, want %d..%d", writes, callers, tt.minWrites, tt.maxWrites)
			}
			f, err := Read(path)
			if err != nil || len(f.Allocations) != callers {
				t.Fatalf("final checkpoint: %v allocations, %v; want %d", f, err, callers)
			}
		})
	}
}

// Callers that arrive while a write runs are all served by the next single
// write, and all get its result, including its error.
func TestWriterCallersDuringWriteShareTheNextOne(t *testing.T) {
	const waiting = 20
	for _, tt := range []struct {
		name    string
		failing bool
	}{{name: "success"}, {name: "write error", failing: true}} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ipam.json")
			if tt.failing {
				// Every rename onto a non-empty directory fails.
				if err := os.MkdirAll(filepath.Join(path, "occupied"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var state podState
			var counter writeCounter
			g := newGate()
			w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{OnWrite: counter.onWrite})
			defer w.Close()
			defer g.open()

			firstErr := make(chan error, 1)
			go func() { firstErr <- w.Commit(context.Background()) }()
			g.waitEntered(t) // the first write has its snapshot and is running

			errs := make(chan error, waiting)
			for range waiting {
				go func() { errs <- w.Commit(context.Background()) }()
			}
			waitForPending(t, w, waiting)
			g.open()

			check := func(who string, err error) {
				if tt.failing && err == nil {
					t.Errorf("%s: Commit = nil, want the write's error", who)
				}
				if !tt.failing && err != nil {
					t.Errorf("%s: Commit = %v", who, err)
				}
			}
			check("first caller", receive(t, firstErr, "the first Commit"))
			var batchErr error
			for i := range waiting {
				err := receive(t, errs, "a waiting Commit")
				check(fmt.Sprintf("waiting caller %d", i), err)
				if i == 0 {
					batchErr = err
				} else if err != batchErr {
					t.Errorf("waiting caller %d got %v, another got %v: not one write's result", i, err, batchErr)
				}
			}
			if writes := counter.writes.Load(); writes != 2 {
				t.Errorf("%d writes, want 2 (the running one and one for all %d waiting callers)", writes, waiting)
			}
			if tt.failing && counter.failures.Load() != 2 {
				t.Errorf("OnWrite saw %d failures, want 2", counter.failures.Load())
			}
		})
	}
}

// A write already running may hold a snapshot from before the caller's
// change; Commit must wait for the next one.
func TestWriterCommitWaitsForAWriteStartedAfterIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	var state podState
	state.add(podAllocation(0))
	g := newGate()
	w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{})
	defer w.Close()
	defer g.open()

	go w.Commit(context.Background())
	g.waitEntered(t) // the running write has only pod 0

	mine := podAllocation(1)
	state.add(mine)
	done := make(chan error, 1)
	go func() { done <- w.Commit(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Commit returned (%v) while the only write started was the one before it", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.open()
	if err := receive(t, done, "Commit"); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !holds(t, path, mine) {
		t.Fatal("Commit returned but the change made before it is not in the file")
	}
}

func TestWriterCommitContextEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	var state podState
	g := newGate()
	w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{})
	defer w.Close()
	defer g.open()

	firstErr := make(chan error, 1)
	go func() { firstErr <- w.Commit(context.Background()) }()
	g.waitEntered(t)

	ctx, cancel := context.WithCancel(context.Background())
	canceledErr := make(chan error, 1)
	go func() { canceledErr <- w.Commit(ctx) }()
	waitForPending(t, w, 1)
	cancel()
	select {
	case err := <-canceledErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Commit = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("canceled Commit did not return while the write was blocked")
	}

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := w.Commit(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit with an ended context = %v, want context.Canceled", err)
	}

	g.open()
	if err := receive(t, firstErr, "the first Commit"); err != nil {
		t.Fatalf("first Commit: %v", err)
	}
	// The writer still works after a caller gave up.
	mine := podAllocation(7)
	state.add(mine)
	if err := w.Commit(context.Background()); err != nil {
		t.Fatalf("Commit after a cancellation: %v", err)
	}
	if !holds(t, path, mine) {
		t.Fatal("Commit after a cancellation did not write")
	}
}

func TestWriterPerCallContextEndsWhileWaitingForTurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	var state podState
	g := newGate()
	w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{PerCallSync: true})
	defer w.Close()
	defer g.open()

	go w.Commit(context.Background())
	g.waitEntered(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Commit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Commit waiting behind a blocked write = %v, want context.DeadlineExceeded", err)
	}
}

func TestWriterCloseWaitsForWriteThenRejects(t *testing.T) {
	for _, perCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("PerCallSync=%v", perCall), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ipam.json")
			var state podState
			mine := podAllocation(3)
			state.add(mine)
			g := newGate()
			w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{PerCallSync: perCall})
			defer g.open()

			commitErr := make(chan error, 1)
			go func() { commitErr <- w.Commit(context.Background()) }()
			g.waitEntered(t)

			closed := make(chan struct{})
			go func() { w.Close(); close(closed) }()
			select {
			case <-closed:
				t.Fatal("Close returned while a write was in flight")
			case <-time.After(50 * time.Millisecond):
			}
			g.open()
			receive(t, closed, "Close")
			if err := receive(t, commitErr, "the Commit in flight"); err != nil {
				t.Fatalf("Commit in flight at Close: %v", err)
			}
			if !holds(t, path, mine) {
				t.Fatal("the write in flight at Close is not in the file")
			}
			if err := w.Commit(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Commit after Close = %v, want ErrClosed", err)
			}
			w.Close() // a second Close is harmless
		})
	}
}

// Commits queued before Close are served, not dropped: their callers were
// promised a write that starts after them.
func TestWriterCloseServesQueuedCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	var state podState
	g := newGate()
	w := NewWriter(path, g.wrap(state.snapshot), WriterOptions{})
	defer g.open()

	go w.Commit(context.Background())
	g.waitEntered(t)
	mine := podAllocation(9)
	state.add(mine)
	queuedErr := make(chan error, 1)
	go func() { queuedErr <- w.Commit(context.Background()) }()
	waitForPending(t, w, 1)

	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	g.open()
	receive(t, closed, "Close")
	if err := receive(t, queuedErr, "the queued Commit"); err != nil {
		t.Fatalf("Commit queued before Close: %v", err)
	}
	if !holds(t, path, mine) {
		t.Fatal("Commit queued before Close returned without its change on disk")
	}
}
