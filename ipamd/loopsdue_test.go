package ipamd

import (
	"testing"
	"time"
)

// A harness need not wake a node for reconciler passes that would be
// skipped (LoopsDue leaves them out), and the passes it slept through
// keep their place on the reconciler's grid: after a change, the next
// pass runs where it would have run with every pass woken for, not at
// the first tick the harness happens to run.
func TestReconcilerSleepsOnItsGrid(t *testing.T) {
	n := newNode(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	cfg := Config{Kernel: n.h, StandInLinks: true, Reconcile: true, Now: func() time.Time { return now },
		ReconcileGrace: 2 * time.Minute, ReconcileInterval: time.Minute}
	sock := sockPath(t)
	d := start(t, sock, cfg, WithManualLoops())
	c := client(t, sock)
	tick := func(at time.Duration) {
		t.Helper()
		now = t0.Add(at)
		if _, err := d.Tick(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	wantLast := func(when string, at time.Duration) {
		t.Helper()
		if got := d.lastReconcile(); !got.Equal(t0.Add(at)) {
			t.Fatalf("%s: last pass at %s, want %s", when, got.Sub(t0), at)
		}
	}
	tick(0)
	wantLast("first tick", 0)
	if due := d.LoopsDue(); !due.IsZero() {
		t.Fatalf("LoopsDue %s after a settled pass over an idle node, want none", due.Sub(t0))
	}
	// Asleep until 7m30s (another loop's tick): the passes at 1m..7m ran,
	// skipped, on time.
	tick(7*time.Minute + 30*time.Second)
	wantLast("a tick between passes after sleeping", 7*time.Minute)

	// A pod starts at 9m, just after the (slept) pass at 9m.
	now = t0.Add(9 * time.Minute)
	if rep, err := c.AddNetwork(ctx(t), addReqFor("web")); err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	if due := d.LoopsDue(); !due.Equal(now) {
		t.Fatalf("LoopsDue %s after a change, want the grid's point at or after it, 9m", due.Sub(t0))
	}
	// The harness runs its next tick (the one at 9m ran before the ADD):
	// no pass there; the next is at 10m.
	tick(9*time.Minute + 5*time.Second)
	wantLast("the tick after the change", 9*time.Minute)
	if due := d.LoopsDue(); !due.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("LoopsDue %s, want the next pass at 10m", due.Sub(t0))
	}
	tick(10 * time.Minute)
	wantLast("the pass after the change", 10*time.Minute)
}
