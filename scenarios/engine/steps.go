package engine

import (
	"fmt"
	"net/netip"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// stepWatch runs the invariants that must hold after every step
// (invariant.CheckStep) and remembers what they found: an address held
// twice for a moment, or released with its objects still in the kernel,
// is a violation even when the run settles clean.
type stepWatch struct {
	daemon *ipamd.Daemon
	held   map[netip.Addr]bool // ipamd's allocations after the last step
	// handed are those of them a DEL had handed its veth pair over for,
	// with the host veth's ifindex (the hand-over's contract: released
	// only once that veth is gone)
	handed map[netip.Addr]int
	found  []invariant.Violation
	// standing are the violations the last check found (kind and text,
	// without the time): one that lasts is reported when it starts, not
	// again at every step it still holds (a double assignment that lasts
	// an hour is one finding, not one per round of ipamd's loops).
	standing map[string]bool
	// repeatable says the last check ran and saw no release (its result
	// depends on nothing but ipamd's allocations and the kernel); gen is
	// the kernel's generation it saw and allocs the version of ipamd's
	// allocations (stepCheckUnlessIdle).
	repeatable bool
	gen        uint64
	allocs     uint64
}

// stepCheck runs after every timeline event, every kubelet DEL attempt and
// every round of ipamd's loops. A release is an address ipamd held after
// the last step and does not now, the same daemon still running: a
// restart without its checkpoint forgets, it does not release.
func (r *run) stepCheck(where string) {
	w := &r.steps1
	cur, handed := map[netip.Addr]bool{}, map[netip.Addr]int{}
	var version uint64
	if r.ipamd != nil {
		version = r.ipamd.Datastore().AllocationsVersion()
		for _, a := range r.ipamd.Allocations() {
			cur[a.IP] = true
			if a.Releasing {
				handed[a.IP] = a.Meta.HostVethIndex
			}
		}
	}
	var released []netip.Addr
	releasedHanded := map[netip.Addr]int{}
	if r.ipamd != nil && r.ipamd == w.daemon {
		for a := range w.held {
			if !cur[a] {
				released = append(released, a)
				if idx, ok := w.handed[a]; ok {
					releasedHanded[a] = idx
				}
			}
		}
	}
	w.daemon, w.held, w.handed = r.ipamd, cur, handed
	w.repeatable, w.gen, w.allocs = false, r.kern.Generation(), version
	vs, err := invariant.CheckStep(r.world(), released, releasedHanded)
	if err != nil {
		r.note("step check after %s: %v", where, err)
		return
	}
	w.repeatable = len(released) == 0
	standing := make(map[string]bool, len(vs))
	for _, v := range vs {
		key := v.Kind + "\x00" + v.What
		if standing[key] {
			continue
		}
		standing[key] = true
		if w.standing[key] {
			continue // (still there: reported when it started)
		}
		v.What = fmt.Sprintf("at t=%s (%s): %s", r.now, where, v.What)
		w.found = append(w.found, v)
		r.note("step invariant: %s", v)
	}
	w.standing = standing
}

// stepCheckUnlessIdle is stepCheck after a round of ipamd's loops that ran
// no ADD. It is skipped when that round changed nothing the check reads:
// the same daemon holds the same allocations (their version has not
// moved: nothing assigned, handed over or released) and the
// kernel's generation has not moved, so no pod started to hold an
// address (an ADD always makes a veth) and no object changed; the pods'
// phases change only in events and kubelet's DEL attempts, each checked
// in full. The check would find what the last one found, no new
// violation, provided that one saw no release (a release is between two
// checks; the next sees none). An idle node's loops run every 5
// simulated seconds, and a fleet has thousands of them, some with a
// violation that lasts (under a legacy policy).
func (r *run) stepCheckUnlessIdle(where string) {
	if r.stepsIdle() {
		return
	}
	r.stepCheck(where)
}

// stepsIdle reports whether a step check now would find what the last one
// found (stepCheckUnlessIdle).
func (r *run) stepsIdle() bool {
	w := &r.steps1
	return w.repeatable && r.ipamd != nil && r.ipamd == w.daemon && r.kern.Generation() == w.gen &&
		r.ipamd.Datastore().AllocationsVersion() == w.allocs
}
