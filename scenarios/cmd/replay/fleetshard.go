package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/fleet"
)

// fleetReport is what replay fleet --json writes, sharded or not: a fleet
// is one coupled world, so its unit of work is one run, a seed under a
// policy. Run i is seed Seeds[i/len(Policies)] under Policies[i mod
// len(Policies)] (seed-major, then the policies in the file's order); a
// shard K/N holds the runs with i mod N == K-1. What names the run (the
// fleet, its file's hash, the seeds, the policies) is in every shard, so
// replay merge can tell shards of one run from a mixture; the merged
// report is the unsharded one, byte for byte (there is no wall time in
// it, which would differ).
type fleetReport struct {
	Fleet    string         `json:"fleet"`
	SHA256   string         `json:"sha256"` // of the fleet file's content
	Seeds    []int64        `json:"seeds"`
	Policies []string       `json:"policies"`
	Shard    *explore.Shard `json:"shard,omitempty"`
	Runs     []fleetRun     `json:"runs"`
}

// fleetRun is one run's result with its index in the report's order.
type fleetRun struct {
	Index int `json:"index"`
	*fleet.Result
}

// maxFleetSeeds bounds --seeds: as many runs as explore has shards at most
// per policy, far beyond what a day of machines runs.
const maxFleetSeeds = explore.MaxShards

// runs is how many runs the whole (unsharded) report has.
func (r *fleetReport) runs() int { return len(r.Seeds) * len(r.Policies) }

// planned is what run i must be: its seed and policy.
func (r *fleetReport) planned(i int) (int64, string) {
	return r.Seeds[i/len(r.Policies)], r.Policies[i%len(r.Policies)]
}

func (r *fleetReport) results() []*fleet.Result {
	out := make([]*fleet.Result, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = run.Result
	}
	return out
}

// failed reports whether a run did not give what the file expects.
func (r *fleetReport) failed() bool {
	return slices.ContainsFunc(r.Runs, func(run fleetRun) bool { return !run.Match })
}

// seedRange is base, base+1, …, base+n-1, or an error when that passes
// the largest seed.
func seedRange(base int64, n int) ([]int64, error) {
	if n < 1 || n > maxFleetSeeds {
		return nil, fmt.Errorf("--seeds %d: want 1 to %d", n, maxFleetSeeds)
	}
	if base > 1<<63-1-int64(n-1) {
		return nil, fmt.Errorf("--seeds %d from seed %d passes the largest seed", n, base)
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = base + int64(i)
	}
	return seeds, nil
}

// shardNamed is a fleet shard with the file it was read from, for naming
// it in an error.
type shardNamed struct {
	path string
	rep  *fleetReport
}

func (s shardNamed) String() string {
	if s.rep.Shard == nil {
		return s.path
	}
	return fmt.Sprintf("%s (shard %s)", s.path, s.rep.Shard)
}

// mergeFleet combines the shards of one sharded fleet run into the report
// the unsharded run writes. It refuses, naming the file and shard, a file
// run without --shard, a shard of another run (another fleet, file
// content, seeds or policies), of another N, given twice, missing, or
// holding other runs than its own.
func mergeFleet(shards []shardNamed) (*fleetReport, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("nothing to merge")
	}
	first := shards[0]
	byK := map[int]shardNamed{}
	for _, s := range shards {
		r := s.rep
		if r.Shard == nil {
			return nil, fmt.Errorf("%s was run without --shard: it is a whole run already", s.path)
		}
		if _, err := explore.ParseShard(r.Shard.String()); err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		if r.Fleet != first.rep.Fleet || r.SHA256 != first.rep.SHA256 || !slices.Equal(r.Seeds, first.rep.Seeds) || !slices.Equal(r.Policies, first.rep.Policies) {
			return nil, fmt.Errorf("%s is of another run: %s; %s is of %s", s, runName(r), first, runName(first.rep))
		}
		if r.Shard.N != first.rep.Shard.N {
			return nil, fmt.Errorf("%s is one of %d shards, %s one of %d", s, r.Shard.N, first, first.rep.Shard.N)
		}
		if o, dup := byK[r.Shard.K]; dup {
			return nil, fmt.Errorf("shard %s is given twice: %s and %s", r.Shard, o.path, s.path)
		}
		byK[r.Shard.K] = s
		if err := checkOwnRuns(r); err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	n := first.rep.Shard.N
	var missing []string
	for k := 1; k <= n; k++ {
		if _, ok := byK[k]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", k, n))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("shards missing: %s (of %s)", strings.Join(missing, ", "), runName(first.rep))
	}
	out := &fleetReport{Fleet: first.rep.Fleet, SHA256: first.rep.SHA256, Seeds: first.rep.Seeds, Policies: first.rep.Policies, Runs: []fleetRun{}}
	for _, s := range shards {
		out.Runs = append(out.Runs, s.rep.Runs...)
	}
	slices.SortFunc(out.Runs, func(a, b fleetRun) int { return a.Index - b.Index })
	return out, nil
}

// checkOwnRuns: a shard holds exactly its runs, in order, each the seed
// and policy its index names (a file cut short or edited is not merged
// into a result that looks whole).
func checkOwnRuns(r *fleetReport) error {
	if len(r.Seeds) == 0 || len(r.Policies) == 0 {
		return fmt.Errorf("names no seeds or no policies")
	}
	var want []int
	for i := range r.runs() {
		if r.Shard.Owns(i) {
			want = append(want, i)
		}
	}
	for j, run := range r.Runs {
		if run.Result == nil {
			return fmt.Errorf("run %d has no result", run.Index)
		}
		if j >= len(want) || run.Index != want[j] {
			return fmt.Errorf("holds run %d where run %s belongs (its runs: %s of %d)", run.Index, nth(want, j), indexList(want), r.runs())
		}
		if seed, pol := r.planned(run.Index); run.Seed != seed || run.Policy != pol {
			return fmt.Errorf("run %d is seed %d under %s, want seed %d under %s", run.Index, run.Seed, run.Policy, seed, pol)
		}
	}
	if len(r.Runs) < len(want) {
		return fmt.Errorf("run %d is missing (its runs: %s of %d)", want[len(r.Runs)], indexList(want), r.runs())
	}
	return nil
}

// runName says which run a report is of, for errors.
func runName(r *fleetReport) string {
	sum := r.SHA256
	if len(sum) > 12 {
		sum = sum[:12]
	}
	return fmt.Sprintf("fleet %s (file sha256 %s), seeds %s, policies %s", r.Fleet, sum, seedList(r.Seeds), strings.Join(r.Policies, ","))
}

func seedList(s []int64) string {
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprint(s[0])
	}
	return fmt.Sprintf("%d to %d", s[0], s[len(s)-1])
}

func nth(xs []int, j int) string {
	if j < len(xs) {
		return fmt.Sprint(xs[j])
	}
	return "none"
}

func indexList(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}
