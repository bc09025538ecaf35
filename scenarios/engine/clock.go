package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/warmpool"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// maxSettle bounds a settle: kubelet's back-off never runs that long.
const maxSettle = time.Hour

// tick is how often ipamd's loops run (the reference's pool monitor
// interval); the reconciler runs on its own interval within them.
const tick = warmpool.DefaultInterval

// nextDue is the time of the earliest pending kubelet DEL retry, -1 if none.
func (r *run) nextDue() time.Duration {
	due := time.Duration(-1)
	for _, p := range r.pods {
		if p.phase == terminating && (due < 0 || p.nextRetry < due) {
			due = p.nextRetry
		}
	}
	return due
}

// dueAt is when advance next runs something (a DEL retry, kubelet
// restarting a crashed ipamd, ipamd's loops), -1 if nothing is due until
// an event.
func (r *run) dueAt() time.Duration {
	due := r.nextDue()
	if r.ipamd == nil && r.restartAt >= 0 && (due < 0 || r.restartAt < due) {
		due = r.restartAt
	}
	if next := r.nextTickAt(); next >= 0 && (due < 0 || next < due) {
		due = next
	}
	return due
}

// nextTickAt is when ipamd's loops next run, -1 if not before an event.
// A tick runs them every 5 simulated seconds, but most of a fleet's
// ticks find nothing to do: the ticks before ipamd's next due pass
// (Daemon.LoopsDue: the warm pool's next possible action, the
// reconciler's next pass, a handed-over address to reap) are skipped,
// the clock staying on the same 5-second grid. They are run all the
// same while kubelet waits to retry an ADD (every tick retries it) and
// while the step check is not idle (every tick checks again: see
// stepCheckUnlessIdle). Options.EveryTick runs every tick.
//
// A skipped tick is one that would have run, idle, before whatever
// happened since: the ticks up to the end of the last advance (before
// the event that follows it), and a tick at the very time of a kubelet
// retry runs after the retry, as advance orders them.
func (r *run) nextTickAt() time.Duration {
	if r.ipamd == nil {
		return -1
	}
	next := r.nextGridTick()
	if r.opt.EveryTick || r.waitingToRun() || !r.stepsIdle() {
		return next
	}
	due := r.ipamd.LoopsDue()
	if due.IsZero() {
		return -1
	}
	return max(next, r.gridAtOrAfter(due.Sub(epoch)))
}

// nextGridTick is the next tick on ipamd's 5-second grid that has not
// run and was not skipped as idle: after the last one run, and after the
// end of the last advance (the ticks up to it that did not run had
// nothing to do). It is never before now: a caller that runs it never
// moves the clock back.
func (r *run) nextGridTick() time.Duration {
	next := r.ticked + tick
	if lo := max(r.idleThrough+1, r.now); next < lo {
		next = r.gridAtOrAfter(lo)
	}
	return next
}

// gridAtOrAfter is the first tick of ipamd's loops at or after t (they
// run every tick since ipamd started).
func (r *run) gridAtOrAfter(t time.Duration) time.Duration {
	if t <= r.ticked {
		return r.ticked + tick
	}
	return r.ticked + (t-r.ticked+tick-1)/tick*tick
}

// waitingToRun reports whether a pod's ADD failed and kubelet still wants
// it running.
func (r *run) waitingToRun() bool {
	for _, p := range r.pods {
		if p.wantRun {
			return true
		}
	}
	return false
}

// advance moves the clock to t, running what falls due in time order:
// kubelet's DEL retries (ties by pod name, so runs are reproducible) and,
// every tick while ipamd is up, ipamd's loops followed by kubelet's
// retries of failed ADDs.
func (r *run) advance(t time.Duration) {
	from, ran := r.now, false
	for {
		var name string
		var next *pod
		for n, p := range r.pods {
			if p.phase != terminating || p.nextRetry > t {
				continue
			}
			if next == nil || p.nextRetry < next.nextRetry || (p.nextRetry == next.nextRetry && n < name) {
				name, next = n, p
			}
		}
		if r.ipamd == nil && r.restartAt >= 0 && r.restartAt <= t && (next == nil || r.restartAt <= next.nextRetry) {
			r.setNow(max(r.now, r.restartAt))
			r.restartAt = -1
			ran = true
			r.note("t=%s kubelet restarts aws-node after its crash", r.now)
			if err := r.startIpamd(r.restartMemory); err != nil {
				r.note("restart failed: %v", err)
			}
			continue
		}
		nextTick := r.nextTickAt()
		if nextTick >= 0 && nextTick <= t && (next == nil || nextTick < next.nextRetry) {
			r.setNow(nextTick)
			r.tickIpamd()
			r.watchIpamd()
			ran = true
			continue
		}
		if next == nil {
			break
		}
		if next.nextRetry > r.now {
			r.setNow(next.nextRetry)
		}
		r.tryDel(name, next)
		r.watchIpamd()
		ran = true
	}
	if t < from && !ran {
		// Nothing was overdue: the caller computed a time in the past,
		// and one that loops until the clock moves would never return.
		r.clockFault("advance to t=%s, before the clock's t=%s, ran nothing", t, from)
	}
	if t > r.now {
		r.setNow(t)
	}
	// Every tick up to t that did not run had nothing to do; after an
	// event at t, the next one that may have is after t.
	r.idleThrough = max(r.idleThrough, t)
}

// tickIpamd runs ipamd's background work once, then retries the ADDs
// kubelet is waiting on.
func (r *run) tickIpamd() {
	r.checkClock("ipamd's loops")
	r.ticked = r.now
	action, err := r.ipamd.Tick(context.Background())
	if st := r.ipamd.Datastore().Stats(); err != nil {
		r.note("t=%s ipamd warm pool: %s failed: %v (pool %d, assigned %d)", r.now, action, err, st.Total, st.Assigned)
	} else if action != "" {
		r.note("t=%s ipamd warm pool: %s (pool %d, assigned %d)", r.now, action, st.Total, st.Assigned)
	}
	var names []string
	for n, p := range r.pods {
		if p.wantRun && p.phase != terminating { // (a failed sandbox is stopped first)
			names = append(names, n)
		}
	}
	if len(names) == 0 || r.pausing {
		r.stepCheckUnlessIdle("ipamd's loops")
		return // (kubelet's retries wait for the ADD in progress)
	}
	defer r.stepCheck("ipamd's loops")
	sort.Strings(names)
	ran := 0
	for _, n := range names {
		p := r.pods[n]
		p.quiet = true // one line for the whole retry round
		if err := r.add(spec.PodRef{Name: n}); err != nil {
			r.note("retry ADD %s: %v", n, err)
		}
		p.quiet = false
		if p.phase == running {
			ran++
		}
	}
	r.note("t=%s kubelet retries %d failed ADDs: %d now run", r.now, len(names), ran)
}

// crashBackoff is how long kubelet waits before restarting a crashed
// aws-node container (its first back-off).
const crashBackoff = 10 * time.Second

// watchIpamd notices an ipamd that died at a failpoint and has kubelet
// restart it after its back-off.
func (r *run) watchIpamd() {
	if r.ipamd == nil || r.ipamd.Serving() {
		return
	}
	r.ipamd = nil
	r.markIpamdDown("crashed at a failpoint")
	r.restartAt = r.now + crashBackoff
	r.note("t=%s ipamd crashed; kubelet restarts it in %s, checkpoint %s", r.now, crashBackoff, r.restartMemory)
}

// settle advances until kubelet has nothing left to retry.
func (r *run) settle() {
	limit := r.now + maxSettle
	for r.now < limit && r.clockErr == nil { // (a clock fault: the run fails)
		due := r.nextDue()
		if r.ipamd == nil && r.restartAt >= 0 && (due < 0 || r.restartAt < due) {
			r.advance(r.restartAt)
			continue
		}
		switch {
		case r.waitingToRun() && r.ipamd != nil && (due < 0 || r.nextGridTick() < due):
			// (not ticked+tick: after skipped idle ticks that is in the
			// past, and advancing to it would not move the clock)
			r.advance(r.nextGridTick())
		case due >= 0:
			r.advance(due)
		default:
			return
		}
	}
}

// finish lets everything settle before the invariants are checked:
// kubelet's retries, then long enough for ipamd's reconciler to release
// what a DEL could not (its grace period and a pass after it).
func (r *run) finish() {
	r.settle()
	grace, interval := r.ipamdTiming()
	r.advance(r.now + max(grace, ipamd.DefaultReconcileGrace) + max(interval, ipamd.DefaultReconcileInterval) + tick)
	// The runtime runs GC again later, now and then: a few more times
	// here, each once ipamd is up (a GC can crash it). What it still
	// cannot collect, nothing will (lostFindings).
	for try := 0; try < 3 && len(r.lost) > 0; try++ {
		if r.ipamd == nil && r.restartAt >= 0 {
			r.advance(r.restartAt + tick)
		}
		if r.ipamd == nil {
			break
		}
		r.note("the runtime runs CNI GC again for the sandboxes it lost")
		r.gc()
		r.watchIpamd()
	}
}

// lostFindings are the sandboxes the runtime lost that no GC collected by
// the end: nothing else will ever remove them.
func (r *run) lostFindings() []invariant.Violation {
	var out []invariant.Violation
	for _, p := range r.lost {
		out = append(out, invariant.Violation{Kind: invariant.Stuck,
			What: fmt.Sprintf("sandbox %s of %s, lost by the runtime, was never collected by GC", p.ContainerID, p.Name)})
	}
	return out
}

// ErrClockBack is a harness bug: the simulated clock went back, or ran
// something at a time it had already passed. ipamd would see its own
// timestamps out of order and the timeline would lie about what caused
// what, so a run that does it fails (Run's error: the explorer counts it
// as a schedule the engine could not run) instead of reporting a verdict.
var ErrClockBack = errors.New("harness bug: the simulated clock went back")

// setNow moves the clock to t: every write of r.now goes through it, so
// that a caller whose arithmetic lands in the past is caught.
func (r *run) setNow(t time.Duration) {
	if t < r.latest {
		r.clockFault("the clock moved from t=%s back to t=%s", r.latest, t)
	}
	r.now = t
	r.latest = max(r.latest, t)
}

// checkClock is called as what runs (ipamd's loops, a DEL attempt) runs:
// not before the latest time the clock has shown, which also catches a
// write of r.now that bypassed setNow.
func (r *run) checkClock(what string) {
	if r.now < r.latest {
		r.clockFault("%s ran at t=%s, after the clock had shown t=%s", what, r.now, r.latest)
	}
	r.latest = max(r.latest, r.now)
}

// clockFault records the run's first clock fault; Run and Node.Check
// return it.
func (r *run) clockFault(format string, a ...any) {
	if r.clockErr == nil {
		r.clockErr = fmt.Errorf("%w: %s", ErrClockBack, fmt.Sprintf(format, a...))
	}
}
