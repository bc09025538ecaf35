package ipamd

import (
	"fmt"
	"time"
)

// The documented bounds of ipamd's timing settings. A value out of range is
// refused at start, naming the setting, the value and the range: a silent
// default would run a daemon other than the one asked for, and some values
// are unsafe (a reconcile grace shorter than an ADD lets the reconciler
// release an address an ADD in progress is about to route, and hand it out
// twice).
var (
	// ReconcileIntervalRange bounds how often the reconciler runs: below a
	// second it would spin on the kernel's dumps; a day is "rarely".
	ReconcileIntervalRange = DurationRange{Min: time.Second, Max: 24 * time.Hour}
	// ReconcileGraceRange bounds how old an allocation must be before the
	// reconciler may find its pod gone. An ADD assigns the address before
	// it makes the pod's veth and host route: the plugin's wait for IPv6
	// duplicate address detection alone may take 10 s, so the floor is
	// three times that.
	ReconcileGraceRange = DurationRange{Min: MinReconcileGrace, Max: 24 * time.Hour}
	// CooldownRange bounds IP_COOLDOWN_PERIOD (the reference accepts any
	// number of seconds; an hour keeps a released address from resting
	// for ever).
	CooldownRange = DurationRange{Min: 0, Max: time.Hour}
)

// MinReconcileGrace is the shortest reconcile grace ipamd accepts.
const MinReconcileGrace = 30 * time.Second

// DurationRange is a duration setting's inclusive bounds.
type DurationRange struct{ Min, Max time.Duration }

// Check refuses a value outside the range, naming the setting.
func (r DurationRange) Check(setting string, v time.Duration) error {
	if v < r.Min || v > r.Max {
		return fmt.Errorf("%s %s is out of range: want between %s and %s", setting, v, r.Min, r.Max)
	}
	return nil
}

// CountRange is a count setting's inclusive bounds.
type CountRange struct{ Min, Max int }

// Check refuses a value outside the range, naming the setting.
func (r CountRange) Check(setting string, v int) error {
	if v < r.Min || v > r.Max {
		return fmt.Errorf("%s %d is out of range: want between %d and %d", setting, v, r.Min, r.Max)
	}
	return nil
}

// checkTiming refuses a Config whose timing settings are out of range;
// zero means the default.
func checkTiming(cfg Config) error {
	checks := []struct {
		name string
		v    time.Duration
		r    DurationRange
	}{
		{"reconcile interval", cfg.ReconcileInterval, ReconcileIntervalRange},
		{"reconcile grace", cfg.ReconcileGrace, ReconcileGraceRange},
		{"IP cooldown", cfg.Cooldown, CooldownRange},
	}
	for _, c := range checks {
		if c.v == 0 {
			continue
		}
		if err := c.r.Check(c.name, c.v); err != nil {
			return fmt.Errorf("ipamd: %w", err)
		}
	}
	if sw := cfg.LeakSweep; sw.Interval != 0 {
		// (a minimum age of zero is not "the default": it would delete an
		// ENI another node is attaching)
		if err := LeakSweepIntervalRange.Check("leaked-ENI sweep interval", sw.Interval); err != nil {
			return fmt.Errorf("ipamd: %w", err)
		}
		if err := LeakSweepMinAgeRange.Check("leaked-ENI minimum age", sw.MinAge); err != nil {
			return fmt.Errorf("ipamd: %w", err)
		}
	}
	return nil
}
