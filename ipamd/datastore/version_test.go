package datastore

import (
	"testing"
)

// Every change to the allocations moves AllocationsVersion and nothing
// else does: a watcher that skips re-reading an unchanged version never
// misses a change.
func TestAllocationsVersionMovesWithEveryChange(t *testing.T) {
	s := store(t, "m5.large")
	last := s.AllocationsVersion()
	step := func(what string, change bool, f func()) {
		t.Helper()
		before := s.Allocations()
		f()
		v, after := s.AllocationsVersion(), s.Allocations()
		if moved := v != last; moved != change {
			t.Errorf("%s: version moved %v, want %v", what, moved, change)
		}
		if !change && len(before) != len(after) {
			t.Errorf("%s: allocations changed (%d -> %d) with the version still", what, len(before), len(after))
		}
		last = v
	}
	var a1, a2, a3 Allocation
	step("assign", true, func() { a1 = mustAssign(t, s, key(1), -1) })
	step("assign again (retried ADD)", false, func() { mustAssign(t, s, key(1), -1) })
	step("lookup and stats", false, func() { s.Lookup(key(1)); s.Stats(); s.Releasing() })
	step("assign another", true, func() { a2 = mustAssign(t, s, key(2), -1) })
	meta := Meta{PodNamespace: "default", PodName: "c1", HostVethIndex: 7}
	var prev Allocation
	step("hand over", true, func() {
		var err error
		if prev, err = s.HandOver(key(1), meta); err != nil {
			t.Fatal(err)
		}
	})
	step("undo the hand-over", true, func() { s.UndoHandOver(prev) })
	step("hand over again", true, func() {
		if _, err := s.HandOver(key(1), meta); err != nil {
			t.Fatal(err)
		}
	})
	step("finish", true, func() {
		cur, _ := s.Lookup(key(1))
		if !s.Finish(cur) {
			t.Fatal("finish refused")
		}
	})
	step("finish twice", false, func() { s.Finish(a1) })
	step("release", true, func() {
		if _, err := s.Release(key(2), Meta{PodNamespace: "default", PodName: "c2"}); err != nil {
			t.Fatal(err)
		}
	})
	step("release unknown", false, func() { s.Release(key(2), Meta{}) })
	step("reinstate", true, func() {
		if err := s.Reinstate(a2); err != nil {
			t.Fatal(err)
		}
	})
	step("release by key", true, func() {
		if _, err := s.ReleaseKey(key(2)); err != nil {
			t.Fatal(err)
		}
	})
	step("assign a third", true, func() { a3 = mustAssign(t, s, key(3), -1) })
	step("undo it", true, func() { s.Undo(a3) })
	step("restore", true, func() {
		if kept, _ := s.Restore([]Allocation{a1}); len(kept) != 1 {
			t.Fatalf("restore kept %v", kept)
		}
	})
}
