package engine

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Skipping the ticks on which ipamd's loops would do nothing (nextTickAt)
// changes nothing a scenario reports: every scenario of the library, in
// every mode and under every policy it names, gives the same result with
// every tick run, its timeline, notes, marks and the times of its step
// findings included.
func TestSkippedTicksChangeNoScenario(t *testing.T) {
	files, err := filepath.Glob("../library/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no library: %v", err)
	}
	for _, file := range files {
		s, err := spec.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range s.Modes {
			for _, pn := range s.Policies() {
				p, err := policy.ByName(pn)
				if err != nil {
					t.Fatal(err)
				}
				var got [2]string
				for i, every := range []bool{false, true} {
					res, err := Run(s, mode, p, Options{EveryTick: every})
					if err != nil {
						t.Fatalf("%s %s %s: %v", file, mode, pn, err)
					}
					if got[i], err = comparable(res); err != nil {
						t.Fatal(err)
					}
				}
				if a, b := got[0], got[1]; a != b {
					t.Errorf("%s in %s under %s: skipping idle ticks changed the result:\n%s", filepath.Base(file), mode, pn, firstDifference(a, b))
				}
			}
		}
	}
}

// comparable is a result as JSON, less what differs between two runs of
// the same scenario: each run has a directory of its own, and how a
// crashed ipamd's socket fails a call in flight is the OS's choice.
func comparable(res *Result) (string, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return "", err
	}
	b = tempDir.ReplaceAll(b, []byte("vpccni-scenario-N"))
	return string(connError.ReplaceAll(b, []byte("connection error: (lost)"))), nil
}

var (
	tempDir   = regexp.MustCompile(`vpccni-scenario-[0-9]+`)
	connError = regexp.MustCompile(`connection error: (EOF|write unix [^ ]*: write: broken pipe|read unix [^ ]*: read: connection reset by peer)`)
)

// firstDifference shows where a and b first differ, with some context.
func firstDifference(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-200, 0)
	return fmt.Sprintf("skipped:    …%s\nevery tick: …%s", a[from:min(i+200, len(a))], b[from:min(i+200, len(b))])
}

// A slow ADD long after the last tick that ran: ipamd's loops run during
// it (pause), from the next tick on the grid, not from the ticks skipped
// before it, which once moved the clock back: the warm pool's growth was
// noted half a minute before the ADD that caused it.
func TestSlowAddAfterSkippedTicks(t *testing.T) {
	s, err := spec.Parse([]byte(`
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
  - add: [slow]                  # the pool grows while the ADD takes its time
expect:
  default: clean
`))
	if err != nil {
		t.Fatal(err)
	}
	var got [2]string
	for i, every := range []bool{false, true} {
		res, err := Run(s, "ipv4", policy.Default{}, Options{EveryTick: every})
		if err != nil {
			t.Fatal(err)
		}
		if got[i], err = comparable(res); err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != got[1] {
		t.Errorf("skipping idle ticks changed the result:\n%s", firstDifference(got[0], got[1]))
	}
}

// After a step check that saw an address released (as a round of
// ipamd's loops does when its reconciler or reaper releases one), the
// next tick runs and is not skipped as idle, whenever ipamd's loops are
// next due: the check on it is the one that sees the release over (a
// violation of the release ends there, and one like it later is a new
// finding). An event's own check sees none here (the DEL's attempt was
// checked first), so the test says the last check saw one.
func TestTickAfterAReleaseRuns(t *testing.T) {
	s, err := spec.Parse([]byte(`
name: tick-after-release
modes: [ipv4]
pods:
  - {name: default/web}
timeline:
  - add: [web]
  - delete: [web]
  - wait: 2m                     # everything settles; the node sleeps
expect:
  default: clean
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRun(s, "ipv4", policy.Default{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for i, ev := range s.Timeline {
		if err := r.event(ev); err != nil {
			t.Fatal(err)
		}
		r.watchIpamd()
		r.stepCheck(fmt.Sprintf("timeline[%d]", i))
	}
	if !r.stepsIdle() {
		t.Fatal("after the delete and its checks, the node is not idle")
	}
	idle := r.nextTickAt()
	r.steps1.repeatable = false // the last check saw a release
	if got, want := r.nextTickAt(), r.nextGridTick(); got != want || got == idle {
		t.Fatalf("next tick at %s, want the next on the grid, %s (idle, %s)", got, want, idle)
	}
}
