package ipamd

import (
	"context"
	"time"

	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/warmpool"
)

// startLoops runs the warm pool and the reconciler in the background,
// unless the harness drives them (WithManualLoops). Called with d.mu held.
func (d *Daemon) startLoops() {
	if d.opt.manualLoops || (d.pool == nil && d.recon == nil && !d.canTakeVeths()) {
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
	if d.pool != nil {
		if action, err = d.pool.Step(ctx); err != nil {
			d.log.Warn("warm pool action failed; retrying next pass", "action", action, "error", err)
		}
	}
	if d.recon != nil && d.cfg.Now().Sub(d.lastReconcile()) >= d.cfg.ReconcileInterval {
		d.reconcileOnce(ctx)
	}
	return action, err
}

// reconcileOnce runs one reconciler pass and reports it.
func (d *Daemon) reconcileOnce(ctx context.Context) {
	d.reconMu.Lock()
	d.reconciledAt = d.cfg.Now()
	d.reconMu.Unlock()
	d.cfg.Metrics.ActionStarted(metrics.FnReconcilePass)
	rep, err := d.recon.Run(ctx)
	d.cfg.Metrics.ActionDone(metrics.FnReconcilePass, err)
	d.cfg.Metrics.ReconcilerRun(err) // a nil *Metrics does nothing
	for kind, n := range rep.Counts {
		d.cfg.Metrics.ReconcilerRemoved(string(kind), n)
	}
	if err != nil {
		d.log.Warn("reconcile pass failed", "error", err)
	}
	if err := d.syncHostNAT(); err != nil {
		d.log.Warn("host NAT rules not reconciled; retrying next pass", "error", err)
	}
}

func (d *Daemon) lastReconcile() time.Time {
	d.reconMu.Lock()
	defer d.reconMu.Unlock()
	return d.reconciledAt
}
