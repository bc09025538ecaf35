package explore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// RandomOptions bound a randomized exploration: generated timelines
// (Generate) rather than one template's single faults.
type RandomOptions struct {
	Seed uint64
	// Schedules stops after this many; Duration after this long; the
	// first reached wins (0: that bound is off; one must be set).
	Schedules int
	Duration  time.Duration
	Modes     []string // default: every mode
	Policies  []string // default: vpccni's flow only
	Workers   int      // default GOMAXPROCS
	Progress  func(done int)
	// StopAtFirst ends the run once a schedule fails (the schedules
	// under way finish): enough for a mutant run, which only asks
	// whether anything is found.
	StopAtFirst bool
	// Shard runs only the shard's schedules (a bound by Schedules only:
	// a time bound would make the shards' union depend on the machines).
	Shard Shard
}

// RandomOutcome is one generated schedule's verdict.
type RandomOutcome struct {
	Index   int                   `json:"index"`
	Mode    string                `json:"mode"`
	Policy  string                `json:"policy"`
	Verdict string                `json:"verdict"`
	Found   []invariant.Violation `json:"violations,omitempty"`
	// Error is a schedule the engine could not run (a harness bug).
	Error string `json:"error,omitempty"`
	// File is the generated scenario (set for failures and errors).
	File *spec.Scenario `json:"-"`
}

// RandomReport is a randomized exploration's result.
type RandomReport struct {
	Seed uint64 `json:"seed"`
	// Schedules is how many ran (a shard's own); Of the run's bound, all
	// shards together.
	Schedules int             `json:"schedules"`
	Of        int             `json:"of,omitempty"`
	Modes     []string        `json:"modes,omitempty"`
	Policies  []string        `json:"policies,omitempty"`
	Shard     *Shard          `json:"shard,omitempty"`
	Took      time.Duration   `json:"took"`
	Matrix    Matrix          `json:"matrix"`
	Failures  []RandomOutcome `json:"failures"`
}

// Matrix counts outcomes by policy, then mode, then verdict.
type Matrix map[string]map[string]Cell

func (m Matrix) add(pol, mode, verdict string) {
	if m[pol] == nil {
		m[pol] = map[string]Cell{}
	}
	if m[pol][mode] == nil {
		m[pol][mode] = Cell{}
	}
	m[pol][mode][verdict]++
}

// PerSecond is the schedules run per second.
func (r *RandomReport) PerSecond() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Schedules) / r.Took.Seconds()
}

// Schedule i of the options: its mode and policy, round robin.
func (o RandomOptions) cell(i int) (mode, pol string) {
	return o.Modes[i%len(o.Modes)], o.Policies[(i/len(o.Modes))%len(o.Policies)]
}

// RunRandom generates and runs schedules until a bound is reached.
func RunRandom(opt RandomOptions) (*RandomReport, error) {
	if opt.Schedules <= 0 && opt.Duration <= 0 {
		return nil, fmt.Errorf("a randomized exploration needs a number of schedules or a duration")
	}
	if len(opt.Modes) == 0 {
		opt.Modes = spec.KnownModes
	}
	if len(opt.Policies) == 0 {
		opt.Policies = []string{policy.Default{}.Name()}
	}
	for _, p := range opt.Policies {
		if _, err := policy.ByName(p); err != nil {
			return nil, err
		}
	}
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.Shard.on() && (opt.Duration > 0 || opt.StopAtFirst) {
		return nil, fmt.Errorf("a sharded exploration is bounded by a number of schedules only")
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if opt.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Duration)
		defer cancel()
	}
	start := time.Now()
	rep := &RandomReport{Seed: opt.Seed, Of: opt.Schedules, Modes: opt.Modes, Policies: opt.Policies, Matrix: Matrix{}}
	if opt.Shard.on() {
		rep.Shard = &opt.Shard
	}
	var mu sync.Mutex
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range opt.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := opt.Shard.index(int(next.Add(1) - 1))
				if opt.Schedules > 0 && i >= opt.Schedules {
					return
				}
				o := runRandomOne(opt, i)
				mu.Lock()
				rep.Matrix.add(o.Policy, o.Mode, o.Verdict)
				if o.Verdict != "clean" {
					rep.Failures = append(rep.Failures, o)
					if opt.StopAtFirst {
						stop()
					}
				}
				rep.Schedules++
				mu.Unlock()
				if opt.Progress != nil {
					opt.Progress(int(done.Add(1)))
				}
			}
		})
	}
	wg.Wait()
	rep.Took = time.Since(start)
	slices.SortFunc(rep.Failures, func(a, b RandomOutcome) int { return a.Index - b.Index })
	return rep, nil
}

// Distinct are the failures that differ in policy, mode or verdict: the
// first schedule of each, the one to shrink.
func (r *RandomReport) Distinct() []RandomOutcome {
	seen := map[string]bool{}
	var out []RandomOutcome
	for _, o := range r.Failures {
		if k := o.Policy + "|" + o.Mode + "|" + o.Verdict; !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	return out
}

// Failed reports whether vpccni's own flow failed a schedule.
func (r *RandomReport) Failed() bool {
	for _, o := range r.Failures {
		if o.Policy == (policy.Default{}).Name() {
			return true
		}
	}
	return false
}

// runRandomOne generates schedule i and runs it.
func runRandomOne(opt RandomOptions, i int) RandomOutcome {
	mode, pol := opt.cell(i)
	o := RandomOutcome{Index: i, Mode: mode, Policy: pol}
	f, err := generated(opt.Seed, i, mode, pol)
	if err == nil {
		var res *engine.Result
		if res, err = runTolerant(f, mode, pol); err == nil {
			o.Verdict, o.Found = "clean", res.Violations
			if res.Main != "" {
				o.Verdict = res.Main
				o.File = f
			}
			return o
		}
	}
	o.Verdict, o.Error, o.File = "ERROR", err.Error(), f
	return o
}

// generated is schedule i as a scenario file would give it: written and
// read back, so that it is validated, and what is run is what is saved.
func generated(seed uint64, i int, mode, pol string) (*spec.Scenario, error) {
	g := Generate(seed, i, mode)
	g.Expect = map[string]spec.Verdicts{pol: {All: "clean"}}
	b, err := yaml.Marshal(g)
	if err != nil {
		return nil, err
	}
	f, err := spec.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("generated schedule %d is not a valid scenario: %w\n%s", i, err, b)
	}
	return f, nil
}

func runTolerant(f *spec.Scenario, mode, pol string) (*engine.Result, error) {
	p, err := policy.ByName(pol)
	if err != nil {
		return nil, err
	}
	return engine.Run(f, mode, p, engine.Options{Quiet: true, Tolerant: true})
}

// ShrinkRandom reduces a failing generated schedule to the fewest events
// and pods that still fail with the same verdict, and names it after its
// seed and index; `replay run` reproduces the file.
func ShrinkRandom(seed uint64, o RandomOutcome) (*spec.Scenario, error) {
	if o.File == nil {
		return nil, fmt.Errorf("schedule %d has no file to shrink", o.Index)
	}
	fails := func(c *spec.Scenario) bool {
		if !withinLimits(c) {
			return false // not a timeline the generator draws
		}
		res, err := runTolerant(c, o.Mode, o.Policy)
		return err == nil && res.Main == o.Verdict
	}
	f, err := minimize(o.File, 0, fails)
	if err != nil {
		return nil, fmt.Errorf("schedule %d: %w", o.Index, err)
	}
	f.Name = fmt.Sprintf("random-%d-%d-%s-%s-%s", seed, o.Index, o.Mode, o.Policy, lower(o.Verdict))
	f.Description = fmt.Sprintf("Found by replay explore --random --seed %d (schedule %d): %s gives %s in %s. Shrunk to the events that still show it.",
		seed, o.Index, o.Policy, lower(o.Verdict), o.Mode)
	f.Expect = map[string]spec.Verdicts{o.Policy: {All: lower(o.Verdict)}}
	// The file must replay as `replay run` runs it: every event applies.
	if res, err := run(f, o.Mode, o.Policy); err != nil || res.Main != o.Verdict {
		return nil, fmt.Errorf("schedule %d: the shrunk file does not replay to %s (%v)", o.Index, o.Verdict, err)
	}
	return f, nil
}
