package datastore

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud"
)

// Every change to the allocations moves AllocationsVersion and nothing
// else does: a watcher that skips re-reading an unchanged version never
// misses a change (AnyReleasing is such a watcher).
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
		// AnyReleasing caches its answer by this version.
		if any, list := s.AnyReleasing(), s.Releasing(); any != (len(list) > 0) {
			t.Errorf("%s: AnyReleasing %v, Releasing lists %d", what, any, len(list))
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

// Version moves with every change to the pool as well as to the
// allocations, and a read moves nothing: the warm pool trusts an unchanged
// version to mean its next pass would do what its last did.
func TestVersionMovesWithThePool(t *testing.T) {
	c := fixedClock()
	s := store(t, "m5.large")
	s.opt.Now, s.opt.Cooldown = c.Now, 30*time.Second
	last := s.Version()
	step := func(what string, change bool, f func()) {
		t.Helper()
		f()
		if moved := s.Version() != last; moved != change {
			t.Errorf("%s: version moved %v, want %v", what, moved, change)
		}
		last = s.Version()
	}
	enis := s.ENIs()
	top := enis[len(enis)-1]
	var taken []netip.Addr
	step("reads", false, func() { s.Stats(); s.ENIs(); s.CooldownEnds(); s.IsFree(top.IPv4[0]) })
	step("assign", true, func() { mustAssign(t, s, key(1), -1) })
	step("take free addresses", true, func() { taken, _ = s.TakeFreeIPv4(top.ID, 2) })
	step("take none", false, func() { s.TakeFreeIPv4(top.ID, 0) })
	step("add them back", true, func() {
		if err := s.AddIPv4(top.ID, taken); err != nil {
			t.Fatal(err)
		}
	})
	step("give one back to EC2", true, func() {
		if err := s.GiveBack(taken[0]); err != nil {
			t.Fatal(err)
		}
	})
	var removed cloud.ENI
	step("remove an ENI", true, func() {
		var err error
		if removed, err = s.RemoveENI(top.ID); err != nil {
			t.Fatal(err)
		}
	})
	step("add it again", true, func() {
		if err := s.AddENI(removed); err != nil {
			t.Fatal(err)
		}
	})
	if _, cooling := s.CooldownEnds(); cooling {
		t.Fatal("an address cools down before any release")
	}
	step("release", true, func() {
		if _, err := s.Release(key(1), Meta{PodNamespace: "default", PodName: "c1"}); err != nil {
			t.Fatal(err)
		}
	})
	want := c.Now().Add(30 * time.Second)
	if ends, cooling := s.CooldownEnds(); !cooling || !ends.Equal(want) {
		t.Errorf("cooldown ends %v (%v), want %v", ends, cooling, want)
	}
	c.Advance(30 * time.Second)
	if ends, cooling := s.CooldownEnds(); cooling {
		t.Errorf("cooldown still ends at %v once it has", ends)
	}
	step("a cooldown ending", false, func() {})
}
