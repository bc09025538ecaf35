package ipamd

import (
	"context"
	"sync"
	"time"

	"github.com/vpccni/vpccni/cloud"
)

// LeakSweep is ipamd's search for ENIs leaked in EC2: ENIs vpccni created
// that are attached to nothing, because an ipamd died between creating an
// ENI and attaching it, or a node was terminated with an ENI attached
// before it was marked DeleteOnTermination. Each such ENI holds a
// subnet's addresses for ever; no node owns it, so any node's ipamd may
// delete it once it is old enough that no ipamd can still be attaching it.
type LeakSweep struct {
	// Interval is the time from one sweep to the next; zero: no sweep.
	Interval time.Duration
	// MinAge spares an available ENI younger than this: another node may
	// be between creating and attaching it.
	MinAge time.Duration
	// Delay, when set, is drawn before each sweep (the first included)
	// and added to its wait, so that a cluster's nodes do not all call
	// EC2 at once. Nil: none.
	Delay func() time.Duration
}

// DefaultLeakSweep is vpccni's: a sweep at start (an ipamd that died in
// the middle of an attach is one that starts again) and every 5 minutes,
// sparing ENIs younger than 2 minutes (an attach takes seconds). A leaked
// ENI is gone at most 7 minutes after it was created, or 5 minutes after
// its node was terminated, whichever node sweeps first. (The reference
// sweeps once an hour, sparing ENIs younger than 5 minutes.)
var DefaultLeakSweep = LeakSweep{Interval: 5 * time.Minute, MinAge: 2 * time.Minute}

// LeakSweepIntervalRange and LeakSweepMinAgeRange bound the settings: an
// attach takes seconds, so an ENI a minute old is no longer being
// attached; a day is "rarely".
var (
	LeakSweepIntervalRange = DurationRange{Min: time.Minute, Max: 24 * time.Hour}
	LeakSweepMinAgeRange   = DurationRange{Min: time.Minute, Max: 24 * time.Hour}
)

// sweepClock is when the next sweep is due (zero: none).
type sweepClock struct {
	mu   sync.Mutex
	next time.Time
}

func (c *sweepClock) due() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

func (c *sweepClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = t
}

// sweeper returns the cloud's sweep, nil when there is none to run.
func (d *Daemon) sweeper() cloud.LeakSweeper {
	if d.cfg.LeakSweep.Interval <= 0 || d.cfg.Cloud == nil {
		return nil
	}
	s, _ := d.cfg.Cloud.(cloud.LeakSweeper) // (a provider without it is not swept)
	return s
}

// scheduleSweep sets the next sweep after wait, plus the drawn delay.
func (d *Daemon) scheduleSweep(wait time.Duration) {
	if d.sweeper() == nil {
		return
	}
	if d.cfg.LeakSweep.Delay != nil {
		wait += d.cfg.LeakSweep.Delay()
	}
	d.sweep.set(d.cfg.Now().Add(wait))
}

// sweepIfDue runs the sweep when it is due, and schedules the next.
func (d *Daemon) sweepIfDue(ctx context.Context) {
	s := d.sweeper()
	at := d.sweep.due()
	if s == nil || at.IsZero() || d.cfg.Now().Before(at) {
		return
	}
	deleted, err := s.DeleteLeakedENIs(ctx, d.cfg.LeakSweep.MinAge)
	if len(deleted) > 0 {
		d.log.Info("deleted ENIs leaked in EC2 (available, created by vpccni, older than the minimum age)",
			"enis", deleted, "minAge", d.cfg.LeakSweep.MinAge)
	}
	if err != nil {
		d.log.Warn("leaked-ENI sweep failed; retrying at the next", "error", err, "deleted", len(deleted))
	}
	d.scheduleSweep(d.cfg.LeakSweep.Interval)
}

// runSweeper sweeps on the real clock until ctx ends (the binary's loop).
func (d *Daemon) runSweeper(ctx context.Context) {
	for {
		wait := max(time.Until(d.sweep.due()), 0)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			d.sweepIfDue(ctx)
		}
	}
}
