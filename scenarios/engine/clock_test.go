package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// slowAddAfterIdle is TestSlowAddAfterSkippedTicks's scenario: ten idle
// minutes in which ipamd's ticks are skipped, then a slow ADD, the way
// into the bug that once moved the clock back.
const slowAddAfterIdle = `
name: slow-add-after-idle-ticks
modes: [ipv4]
node:
  instanceType: m5.large
  start: fresh
  warmPool: {warmIPTarget: 1, minimumIPTarget: 2}
pods:
  - {name: default/idle, count: 2}
  - {name: default/slow, addTakes: 25s}
timeline:
  - add: [idle-*]
  - settle: {}
  - wait: 10m32s
  - add: [slow]
expect:
  default: clean
`

// The old slow ADD (pause before nextGridTick) ran the ticks skipped as
// idle from the last tick run, setting the clock back to each. Put back
// before the slow ADD, it makes Run fail with the clock fault instead of
// reporting a verdict.
func TestClockMovedBackFailsTheRun(t *testing.T) {
	s, err := spec.Parse([]byte(slowAddAfterIdle))
	if err != nil {
		t.Fatal(err)
	}
	var skipped bool
	opt := Options{atEvent: func(r *run, i int) {
		if i != 3 || r.ipamd == nil {
			return
		}
		// The ticks up to now were skipped: the old loop starts behind
		// the clock (the test means nothing otherwise).
		skipped = r.ticked+tick < r.now
		end := r.now + 25*time.Second
		for r.ipamd != nil && r.ticked+tick <= end { // (the old pause, verbatim)
			r.now = r.ticked + tick
			r.tickIpamd()
		}
		r.now = end
	}}
	res, err := Run(s, "ipv4", policy.Default{}, opt)
	if !skipped {
		t.Fatal("no idle tick was skipped before the slow ADD: the old pause would not move the clock back here")
	}
	if !errors.Is(err, ErrClockBack) {
		t.Fatalf("Run = %v, %v; want ErrClockBack", res, err)
	}
	// The message says where and how far back: the first tick run behind
	// the clock, at the end of the ten idle minutes.
	for _, want := range []string{"timeline[3]", "ipamd's loops ran at t=", "after the clock had shown t=10m"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// The run as it is (the clock's writes through setNow) passes the same
// scenario: the check does not fire on a correct run.
func TestClockNeverBackOnTheSlowAdd(t *testing.T) {
	s, err := spec.Parse([]byte(slowAddAfterIdle))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(s, "ipv4", policy.Default{}, Options{}); err != nil {
		t.Fatal(err)
	}
}

// Each way the engine moves its clock is checked: setNow to an earlier
// time, an advance to a time already passed that runs nothing (the old
// settle, which advanced to a skipped tick for ever), a DEL attempt run
// behind the clock; the first fault is kept, and a fleet's node reports
// it from Check.
func TestClockFaults(t *testing.T) {
	s, err := spec.Parse([]byte(`
name: clock-faults
modes: [ipv4]
pods:
  - {name: default/web}
timeline:
  - add: [web]
expect:
  default: clean
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		fault func(r *run)
		want  string
	}{
		{"setNow back", func(r *run) { r.setNow(r.now - time.Second) },
			"the clock moved from t=1m0s back to t=59s"},
		{"advance to the past", func(r *run) { r.advance(r.now - tick) },
			"advance to t=55s, before the clock's t=1m0s, ran nothing"},
		{"DEL behind the clock", func(r *run) {
			r.now -= time.Second // (a write that bypasses setNow)
			r.pods["default/web"].phase = terminating
			r.tryDel("default/web", r.pods["default/web"])
		}, "DEL default/web ran at t=59s, after the clock had shown t=1m0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := newRun(s, "ipv4", policy.Default{}, Options{Quiet: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			if err := r.event(s.Timeline[0]); err != nil {
				t.Fatal(err)
			}
			r.advance(time.Minute)
			if r.clockErr != nil {
				t.Fatalf("a correct run faulted: %v", r.clockErr)
			}
			c.fault(r)
			if !errors.Is(r.clockErr, ErrClockBack) || !strings.Contains(r.clockErr.Error(), c.want) {
				t.Fatalf("clock fault %v, want one saying %q", r.clockErr, c.want)
			}
			first := r.clockErr
			r.setNow(0)
			if r.clockErr != first {
				t.Errorf("a later fault replaced the first: %v", r.clockErr)
			}
			n := &Node{r: r, name: "node-1"}
			if _, err := n.Check(nil); !errors.Is(err, ErrClockBack) || !strings.Contains(err.Error(), "node node-1") {
				t.Errorf("Node.Check = %v, want the clock fault", err)
			}
		})
	}
}
