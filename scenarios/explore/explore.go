// Package explore enumerates the fault space of a scenario template: every
// failpoint the template reaches × every occurrence of it × crash, error or
// hang × mode × delete policy × what ipamd finds of its checkpoint when it
// restarts. Each combination is a schedule: the template with one
// failpoint armed from the start. Schedules run on the kernel model in
// parallel; a failing one is shrunk to the fewest events and pods that
// still fail the same way and written as a scenario file that replays it.
package explore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Options bound the space.
type Options struct {
	Modes    []string // default: the template's
	Policies []string // default: every policy
	Actions  []failpoint.Action
	Memories []string // what a restarted ipamd finds: default kept, lost, corrupt
	// MaxOccurrences caps the occurrences tried per point (0: all).
	MaxOccurrences int
	Workers        int // default GOMAXPROCS
	// Progress, when set, is told after each schedule.
	Progress func(done, total int)
	// Shard runs only the shard's schedules (their Index kept).
	Shard Shard
}

// Schedule is one point of the fault space.
type Schedule struct {
	Mode       string `json:"mode"`
	Policy     string `json:"policy"`
	Point      string `json:"failpoint"`
	Action     string `json:"action"`
	Occurrence int    `json:"occurrence"`
	Memory     string `json:"memory"`
}

func (s Schedule) String() string {
	return fmt.Sprintf("%s %s@%d memory=%s mode=%s policy=%s", s.Point, s.Action, s.Occurrence, s.Memory, s.Mode, s.Policy)
}

// Outcome is a schedule's verdict: "clean" or the most serious kind.
type Outcome struct {
	// Index is the schedule's place in the enumeration (Enumerate).
	Index int `json:"index"`
	Schedule
	Verdict    string                `json:"verdict"`
	Violations []invariant.Violation `json:"violations,omitempty"`
}

// Failed reports whether the invariants caught something.
func (o Outcome) Failed() bool { return o.Verdict != "clean" }

// Report is a whole exploration.
type Report struct {
	Template  string    `json:"template"`
	Schedules int       `json:"schedules"`
	Outcomes  []Outcome `json:"outcomes"`
	Shard     *Shard    `json:"shard,omitempty"`
}

func (o *Options) defaults(t *spec.Scenario) {
	if len(o.Modes) == 0 {
		o.Modes = t.Modes
	}
	if len(o.Policies) == 0 {
		for _, p := range policy.All {
			o.Policies = append(o.Policies, p.Name())
		}
	}
	if len(o.Actions) == 0 {
		o.Actions = failpoint.Actions
	}
	if len(o.Memories) == 0 {
		o.Memories = spec.KnownMemory
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
}

// Enumerate runs the template once per mode and policy with nothing armed
// to learn which failpoints it reaches and how often, and returns every
// schedule of the space.
func Enumerate(t *spec.Scenario, opt Options) ([]Schedule, error) {
	opt.defaults(t)
	var out []Schedule
	for _, mode := range opt.Modes {
		for _, pol := range opt.Policies {
			res, err := run(schedFile(t, nil, pol), mode, pol)
			if err != nil {
				return nil, fmt.Errorf("baseline %s/%s: %w", mode, pol, err)
			}
			points := make([]string, 0, len(res.Hits))
			for p := range res.Hits {
				points = append(points, p)
			}
			sort.Strings(points)
			for _, p := range points {
				n := res.Hits[p]
				if opt.MaxOccurrences > 0 {
					n = min(n, opt.MaxOccurrences)
				}
				for occ := 1; occ <= n; occ++ {
					for _, a := range opt.Actions {
						for _, m := range opt.Memories {
							out = append(out, Schedule{Mode: mode, Policy: pol, Point: p, Action: string(a), Occurrence: occ, Memory: m})
						}
					}
				}
			}
		}
	}
	return out, nil
}

// Run runs every schedule, opt.Workers at a time, and returns the
// outcomes in the schedules' order.
func Run(t *spec.Scenario, scheds []Schedule, opt Options) (*Report, error) {
	opt.defaults(t)
	var owned []int
	for i := range scheds {
		if opt.Shard.Owns(i) {
			owned = append(owned, i)
		}
	}
	rep := &Report{Template: t.Name, Schedules: len(owned), Outcomes: make([]Outcome, len(owned))}
	if opt.Shard.on() {
		rep.Shard = &opt.Shard
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next, done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range opt.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				j := int(next.Add(1) - 1)
				if j >= len(owned) {
					return
				}
				i := owned[j]
				o, err := RunOne(t, scheds[i])
				o.Index = i
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("%s: %w", scheds[i], err); cancel() })
					return
				}
				rep.Outcomes[j] = o
				if opt.Progress != nil {
					opt.Progress(int(done.Add(1)), len(owned))
				}
			}
		})
	}
	wg.Wait()
	return rep, firstErr
}

// RunOne runs one schedule.
func RunOne(t *spec.Scenario, s Schedule) (Outcome, error) {
	res, err := run(schedFile(t, &s, s.Policy), s.Mode, s.Policy)
	if err != nil {
		return Outcome{}, err
	}
	return outcomeOf(s, res), nil
}

func outcomeOf(s Schedule, res *engine.Result) Outcome {
	o := Outcome{Schedule: s, Verdict: "clean", Violations: res.Violations}
	if res.Main != "" {
		o.Verdict = res.Main
	}
	return o
}

func run(f *spec.Scenario, mode, pol string) (*engine.Result, error) {
	p, err := policy.ByName(pol)
	if err != nil {
		return nil, err
	}
	return engine.Run(f, mode, p, engine.Options{Quiet: true})
}

// schedFile is the template with the schedule's failpoint armed first and
// its memory on every ipamd restart; nil s is the template alone. The
// expectation is "clean" for the one policy: the caller reads the
// verdict, not the match.
func schedFile(t *spec.Scenario, s *Schedule, pol string) *spec.Scenario {
	f := *t
	f.Timeline = nil
	f.Headline = false // a counterexample is not the library's headline
	if s != nil {
		f.Timeline = append(f.Timeline, spec.Event{Failpoint: &spec.Failpoint{Name: s.Point, Action: s.Action,
			Occurrence: s.Occurrence, Memory: s.Memory}})
	}
	for _, ev := range t.Timeline {
		if s != nil && (ev.CancelEviction != "" || ev.Restart != "") {
			ev.Memory = s.Memory
		}
		f.Timeline = append(f.Timeline, ev)
	}
	f.Expect = map[string]spec.Verdicts{pol: {All: "clean"}}
	return &f
}

// Cell counts outcomes of one policy in one mode by verdict.
type Cell map[string]int

// Matrix is the outcomes counted by policy, then mode.
func (r *Report) Matrix() Matrix {
	m := Matrix{}
	for _, o := range r.Outcomes {
		m.add(o.Policy, o.Mode, o.Verdict)
	}
	return m
}

// Failures are the failing outcomes, grouped so that each distinct
// (policy, mode, failpoint, action, verdict) appears once: the first
// occurrence and memory that show it.
func (r *Report) Failures() []Outcome {
	seen := map[string]bool{}
	var out []Outcome
	for _, o := range r.Outcomes {
		if !o.Failed() {
			continue
		}
		k := strings.Join([]string{o.Policy, o.Mode, o.Point, o.Action, o.Verdict}, "|")
		if !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b Outcome) int {
		return strings.Compare(a.Policy+a.Mode+a.Point, b.Policy+b.Mode+b.Point)
	})
	return out
}
