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
	if d.recon != nil && d.cfg.Now().Sub(d.lastReconcile()) >= d.cfg.ReconcileInterval {
		d.reconcileOnce(ctx)
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
	if canTell && last.valid && last.gen == gen && last.version == version {
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
	var tablesGen uint64
	tablesTell := false
	if d.cfg.HostNAT != nil {
		tablesGen, tablesTell = generationOf(d.cfg.HostNAT.Tables)
	}
	kernelGen, kernelTell := generationOf(d.cfg.Kernel)
	now := settledNAT{valid: tablesTell && kernelTell, tables: tablesGen, kernel: kernelGen, version: d.store.Version()}
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
	if d.cfg.HostNAT != nil {
		tablesGen, _ = generationOf(d.cfg.HostNAT.Tables)
	}
	kernelGen, _ = generationOf(d.cfg.Kernel)
	d.reconMu.Lock()
	d.natSettled = settledNAT{valid: now.valid && err == nil, tables: tablesGen, kernel: kernelGen, version: d.store.Version()}
	d.reconMu.Unlock()
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
	if d.canTakeVeths() && len(d.store.Releasing()) > 0 {
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
	if d.recon != nil {
		earlier(d.lastReconcile().Add(d.cfg.ReconcileInterval))
	}
	if d.sweeper() != nil {
		earlier(d.sweep.due())
	}
	return due
}

func (d *Daemon) lastReconcile() time.Time {
	d.reconMu.Lock()
	defer d.reconMu.Unlock()
	return d.reconciledAt
}
