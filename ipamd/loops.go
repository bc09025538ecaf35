package ipamd

import (
	"context"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/warmpool"
)

// startLoops runs the warm pool and the reconciler in the background,
// unless the harness drives them (WithManualLoops). Called with d.mu held.
func (d *Daemon) startLoops() {
	if d.opt.manualLoops || (d.pool == nil && d.recon == nil && !d.canTakeVeths() && d.sweeper() == nil) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	if d.canTakeVeths() {
		d.loops.Go(func() { d.runReaper(ctx) })
	}
	if d.pool != nil {
		d.loops.Go(func() { d.pool.Run(ctx, warmpool.DefaultInterval) })
	}
	if d.sweeper() != nil {
		d.loops.Go(func() { d.runSweeper(ctx) })
	}
	if d.recon != nil {
		d.loops.Go(func() {
			t := time.NewTicker(d.cfg.ReconcileInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					d.reconcileOnce(ctx)
				}
			}
		})
	}
}

// stopLoops ends the background loops and waits for them. Called with
// d.mu held.
func (d *Daemon) stopLoops() {
	if d.stop != nil {
		d.stop()
		d.loops.Wait()
		d.stop = nil
	}
}

// Tick is one pass of the background work, for a harness on a simulated
// clock (WithManualLoops): the reaper, a warm-pool step, and a reconcile pass
// when one is due. It returns the warm-pool action taken ("" for none) and its error.
func (d *Daemon) Tick(ctx context.Context) (action string, err error) {
	d.mu.Lock()
	serving := d.listener != nil
	d.mu.Unlock()
	if !serving {
		return "", nil
	}
	if err := d.reapOnce(ctx, d.callFault(ctx)); err != nil {
		return "", err
	}
	if d.pool != nil && d.poolMayAct() {
		if action, err = d.pool.Step(ctx); err != nil {
			if failpoint.Is(err, failpoint.Crash) {
				// Died in the middle of a call to EC2 (the cloud's
				// failpoints): nothing after it runs.
				d.Kill()
				return action, err
			}
			d.log.Warn("warm pool action failed; retrying next pass", "action", action, "error", err)
		}
	}
	if d.recon != nil {
		d.skipPassesSlept()
		if d.cfg.Now().Sub(d.lastReconcile()) >= d.cfg.ReconcileInterval {
			d.reconcileOnce(ctx)
		}
	}
	d.sweepIfDue(ctx)
	return action, err
}

// settledPass is a reconciler pass that changed nothing and left nothing
// for later (reconcile.Report.Settled), over the kernel at generation gen
// and the store at version: the reconciler reads nothing else but the
// clock, and a settled pass left nothing the clock could change, so a
// pass over the same generation and version would settle the same way.
type settledPass struct {
	valid        bool
	gen, version uint64
}

// covers reports whether a pass over the kernel at gen (if the kernel can
// tell) and the store at version would settle as p did.
func (p settledPass) covers(gen uint64, canTell bool, version uint64) bool {
	return canTell && p.valid && p.gen == gen && p.version == version
}

// generationOf is the kernel's change count when the kernel can tell it
// (the kernel model can; netlink cannot).
func generationOf(k any) (uint64, bool) {
	g, ok := k.(interface{ Generation() uint64 })
	if !ok {
		return 0, false
	}
	return g.Generation(), true
}

// poolMayAct reports whether a warm-pool step now could do anything: not
// when the last one did nothing over the same store and none of its
// timers has run out since (warmpool.Manager.Due).
func (d *Daemon) poolMayAct() bool {
	at, known := d.pool.Due()
	return !known || (!at.IsZero() && !d.cfg.Now().Before(at))
}

// reconcileOnce runs one reconciler pass and reports it. The pass is
// skipped when the last one settled over the same kernel and pool: a
// fleet's idle nodes reconcile every minute all day.
func (d *Daemon) reconcileOnce(ctx context.Context) {
	gen, canTell := generationOf(d.cfg.Kernel)
	version := d.store.Version()
	d.reconMu.Lock()
	d.reconciledAt = d.cfg.Now()
	last := d.reconSettled
	d.reconMu.Unlock()
	d.cfg.Metrics.ActionStarted(metrics.FnReconcilePass)
	var rep reconcile.Report
	var err error
	if last.covers(gen, canTell, version) {
		err = ctx.Err() // (a pass ended before it began fails, skipped or not)
	} else {
		rep, err = d.recon.Run(ctx)
		d.reconMu.Lock()
		d.reconSettled = settledPass{valid: canTell && err == nil && rep.Settled(), gen: gen, version: version}
		d.reconMu.Unlock()
	}
	d.cfg.Metrics.ActionDone(metrics.FnReconcilePass, err)
	d.cfg.Metrics.ReconcilerRun(err) // a nil *Metrics does nothing
	for kind, n := range rep.Counts {
		d.cfg.Metrics.ReconcilerRemoved(string(kind), n)
	}
	if err != nil {
		d.log.Warn("reconcile pass failed", "error", err)
	}
	d.syncHostNATUnlessSettled()
}

// syncHostNATUnlessSettled checks the host NAT rules, unless the last
// check passed over the same tables, kernel and pool (the plan reads the
// ENIs; the check reads the tables and the mark rule): it would pass again
// without changing anything. Only tables and a kernel that count their
// changes (the models) can tell.
func (d *Daemon) syncHostNATUnlessSettled() {
	now := d.hostNATState()
	d.reconMu.Lock()
	last := d.natSettled
	d.reconMu.Unlock()
	if now.valid && last == now {
		return
	}
	err := d.syncHostNAT()
	if err != nil {
		d.log.Warn("host NAT rules not reconciled; retrying next pass", "error", err)
	}
	// What the check left is what the next one would find: read after it.
	after := d.hostNATState()
	after.valid = after.valid && err == nil
	d.reconMu.Lock()
	d.natSettled = after
	d.reconMu.Unlock()
}

// hostNATState is what a host NAT check would read, as a settledNAT (valid
// when the tables and the kernel can tell their generations).
func (d *Daemon) hostNATState() settledNAT {
	var tablesGen uint64
	tablesTell := false
	if d.cfg.HostNAT != nil {
		tablesGen, tablesTell = generationOf(d.cfg.HostNAT.Tables)
	}
	kernelGen, kernelTell := generationOf(d.cfg.Kernel)
	return settledNAT{valid: tablesTell && kernelTell, tables: tablesGen, kernel: kernelGen, version: d.store.Version()}
}

// hostNATIdle reports whether the host NAT check does nothing at all: no
// tables to keep, no ENIs to plan for, or IPv6 (no SNAT).
func (d *Daemon) hostNATIdle() bool {
	return d.cfg.HostNAT == nil || d.eni == nil || d.cfg.IPv6
}

// settledNAT is a host NAT check that passed, over the tables and kernel
// at these generations and the store at this version.
type settledNAT struct {
	valid                   bool
	tables, kernel, version uint64
}

// LoopsDue is when Tick next has work, for a harness that runs the loops
// on a simulated clock (WithManualLoops) and skips the passes that would
// do nothing: now when the next pass must run, the zero time when no pass
// has work until a call changes the daemon's state. Only the warm pool
// and the reconciler's schedule depend on the clock; the reaper has work
// exactly when a handed-over address is releasing.
func (d *Daemon) LoopsDue() time.Time {
	d.mu.Lock()
	serving := d.listener != nil
	d.mu.Unlock()
	now := d.cfg.Now()
	if !serving {
		return time.Time{}
	}
	if d.canTakeVeths() && d.store.AnyReleasing() {
		return now
	}
	var due time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (due.IsZero() || t.Before(due)) {
			due = t
		}
	}
	if d.pool != nil {
		at, ok := d.pool.Due()
		if !ok {
			return now
		}
		earlier(at)
	}
	if d.recon != nil && !d.passWouldSkip() {
		earlier(nextOnGrid(d.lastReconcile(), d.cfg.ReconcileInterval, now))
	}
	if d.sweeper() != nil {
		earlier(d.sweep.due())
	}
	return due
}

// A harness on a simulated clock need not wake a node for reconciler
// passes that would be skipped: a fleet's idle nodes would otherwise wake
// sixty times an hour each for nothing. Such passes keep their place on
// the reconciler's grid (one pass every ReconcileInterval since the last
// one ran), so the first pass after a change runs when it would have run
// had every pass been woken for.

// passWouldSkip reports whether a reconciler pass now would do nothing:
// the last pass settled over the same kernel and store, and the host NAT
// check it runs after would pass again unchanged (or there is none).
func (d *Daemon) passWouldSkip() bool {
	gen, canTell := generationOf(d.cfg.Kernel)
	version := d.store.Version()
	d.reconMu.Lock()
	last, nat := d.reconSettled, d.natSettled
	d.reconMu.Unlock()
	return last.covers(gen, canTell, version) && (d.hostNATIdle() || nat.valid && nat == d.hostNATState())
}

// skipPassesSlept moves the reconciler's last pass to the last point of
// its grid before now: a harness runs its ticks in time order and skips
// only the ones LoopsDue leaves out, so the passes due before this tick
// that no tick ran were passes that would have been skipped, on time. The
// pass due now, if any, is this tick's.
func (d *Daemon) skipPassesSlept() {
	now, interval := d.cfg.Now(), d.cfg.ReconcileInterval
	last := d.lastReconcile()
	if interval <= 0 || last.IsZero() || now.Sub(last) <= interval {
		return
	}
	onGrid := last.Add((now.Sub(last) - 1) / interval * interval)
	d.reconMu.Lock()
	d.reconciledAt = onGrid
	d.reconMu.Unlock()
}

// nextOnGrid is the first point of the grid last+k*interval (k >= 1) at
// or after now.
func nextOnGrid(last time.Time, interval time.Duration, now time.Time) time.Time {
	next := last.Add(interval)
	if interval > 0 && next.Before(now) {
		next = last.Add((now.Sub(last) + interval - 1) / interval * interval)
	}
	return next
}

func (d *Daemon) lastReconcile() time.Time {
	d.reconMu.Lock()
	defer d.reconMu.Unlock()
	return d.reconciledAt
}
