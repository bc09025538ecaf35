package explore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Shard is one of N parts of an exploration, for running it on many
// machines (deploy/explore: a Kubernetes Indexed Job): schedule i belongs
// to shard K of N when i mod N is K-1. Every schedule is a pure function
// of its index (the seed and i, or the template and i), so the shards of
// a run, merged (MergeRandom, MergeSystematic), are the unsharded run.
type Shard struct {
	K int `json:"k"`
	N int `json:"n"`
}

// MaxShards bounds N.
const MaxShards = 10000

// ParseShard reads "K/N" (1 <= K <= N).
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(s, "/")
	ki, err1 := strconv.Atoi(k)
	ni, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || ni < 1 || ni > MaxShards || ki < 1 || ki > ni {
		return Shard{}, fmt.Errorf("shard %q: want K/N with 1 <= K <= N <= %d (e.g. 2/8)", s, MaxShards)
	}
	return Shard{K: ki, N: ni}, nil
}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.K, s.N) }

// on reports whether the shard is set (the zero Shard is the whole run).
func (s Shard) on() bool { return s.N > 0 }

// index is the j-th schedule index of the shard.
func (s Shard) index(j int) int {
	if !s.on() {
		return j
	}
	return j*s.N + s.K - 1
}

// Owns reports whether schedule i is the shard's.
func (s Shard) Owns(i int) bool { return !s.on() || i%s.N == s.K-1 }

// checkShards: the shards are 1..N of one N, each exactly once.
func checkShards(shards []*Shard) error {
	if len(shards) == 0 {
		return fmt.Errorf("nothing to merge")
	}
	var n int
	seen := map[int]bool{}
	for i, s := range shards {
		if s == nil {
			return fmt.Errorf("input %d is not a shard (it was run without --shard)", i+1)
		}
		if n == 0 {
			n = s.N
		}
		if s.N != n {
			return fmt.Errorf("input %d is shard %s, the others are of %d", i+1, s, n)
		}
		if seen[s.K] {
			return fmt.Errorf("shard %s is given twice", s)
		}
		seen[s.K] = true
	}
	var missing []string
	for k := 1; k <= n; k++ {
		if !seen[k] {
			missing = append(missing, fmt.Sprintf("%d/%d", k, n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("shards missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// MergeRandom combines the shards of one randomized exploration (same
// seed, schedules, modes and policies) into the report the unsharded run
// gives: the matrices summed, the failures in schedule order. Took is the
// longest shard's.
func MergeRandom(reps []*RandomReport) (*RandomReport, error) {
	var shards []*Shard
	for _, r := range reps {
		shards = append(shards, r.Shard)
	}
	if err := checkShards(shards); err != nil {
		return nil, err
	}
	first := reps[0]
	out := &RandomReport{Seed: first.Seed, Of: first.Of, Modes: first.Modes, Policies: first.Policies, Matrix: Matrix{}}
	for _, r := range reps {
		if r.Seed != first.Seed || r.Of != first.Of || !slices.Equal(r.Modes, first.Modes) || !slices.Equal(r.Policies, first.Policies) {
			return nil, fmt.Errorf("shard %s is of another run (seed %d, %d schedules, modes %v, policies %v; shard %s: seed %d, %d, %v, %v)",
				r.Shard, r.Seed, r.Of, r.Modes, r.Policies, first.Shard, first.Seed, first.Of, first.Modes, first.Policies)
		}
		out.Schedules += r.Schedules
		out.Took = max(out.Took, r.Took)
		for p, byMode := range r.Matrix {
			for m, cell := range byMode {
				for v, c := range cell {
					for range c {
						out.Matrix.add(p, m, v)
					}
				}
			}
		}
		out.Failures = append(out.Failures, r.Failures...)
	}
	slices.SortFunc(out.Failures, func(a, b RandomOutcome) int { return a.Index - b.Index })
	return out, nil
}

// MergeSystematic combines the shards of one systematic exploration (same
// template) into the unsharded report: outcomes in schedule order.
func MergeSystematic(reps []*Report) (*Report, error) {
	var shards []*Shard
	for _, r := range reps {
		shards = append(shards, r.Shard)
	}
	if err := checkShards(shards); err != nil {
		return nil, err
	}
	out := &Report{Template: reps[0].Template}
	for _, r := range reps {
		if r.Template != out.Template {
			return nil, fmt.Errorf("shard %s explores %s, shard %s %s", r.Shard, r.Template, reps[0].Shard, out.Template)
		}
		out.Schedules += r.Schedules
		out.Outcomes = append(out.Outcomes, r.Outcomes...)
	}
	slices.SortFunc(out.Outcomes, func(a, b Outcome) int { return a.Index - b.Index })
	return out, nil
}
