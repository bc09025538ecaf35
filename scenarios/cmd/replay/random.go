package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// randomFlags are replay explore --random's settings, checked.
type randomFlags struct {
	seed            string
	schedules       int
	duration        time.Duration
	modes, policies []string
	workers         int
	out, json, html string
	noShrink        bool
	shard           explore.Shard
}

// defaultSchedules bounds a --random run given neither --schedules nor
// --for: about twenty seconds here.
const defaultSchedules = 2000

func runRandom(f randomFlags, stdout, stderr io.Writer) int {
	opt := explore.RandomOptions{Schedules: f.schedules, Duration: f.duration, Modes: f.modes, Policies: f.policies, Workers: f.workers, Shard: f.shard}
	switch {
	case f.seed == "":
		opt.Seed = uint64(time.Now().UnixNano())
	default:
		s, err := strconv.ParseUint(f.seed, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "replay explore: --seed %q: want a whole number from 0 to %d\n", f.seed, uint64(1<<64-1))
			return exitUsage
		}
		opt.Seed = s
	}
	if f.schedules < 0 || f.duration < 0 {
		fmt.Fprintln(stderr, "replay explore: --schedules and --for must not be negative")
		return exitUsage
	}
	if f.shard.N > 0 && f.duration > 0 {
		fmt.Fprintln(stderr, "replay explore: --shard needs --schedules, not --for: the shards of a timed run would depend on each machine's speed")
		return exitUsage
	}
	if f.schedules == 0 && f.duration == 0 {
		opt.Schedules = defaultSchedules
	}
	for _, m := range f.modes {
		if !slices.Contains(spec.KnownModes, m) {
			fmt.Fprintf(stderr, "replay explore: --mode %q is not one of %v\n", m, spec.KnownModes)
			return exitUsage
		}
	}
	for _, p := range f.policies {
		if _, err := policy.ByName(p); err != nil {
			fmt.Fprintln(stderr, "replay explore: --policy:", err)
			return exitUsage
		}
	}
	htmlFile, ok := openHTML(f.html, stderr)
	if !ok {
		return exitUsage
	}
	page := newExplorePage(htmlFile, fmt.Sprintf("vpccni explore --random, seed %d", opt.Seed))
	text := stdout
	if f.json == "-" {
		text = io.Discard
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // as for the enumeration: many short runs
	}
	fmt.Fprintf(text, "seed %d (replay explore --random --seed %d gives the same schedules)\n", opt.Seed, opt.Seed)
	opt.Progress = randomProgress(stderr, opt)
	rep, err := explore.RunRandom(opt)
	if err != nil {
		fmt.Fprintln(stderr, "replay explore:", err)
		return exitUsage
	}
	printMatrix(text, rep.Matrix)
	summary := fmt.Sprintf("%d schedules in %s (%.0f/s), seed %d%s", rep.Schedules, rep.Took.Round(time.Millisecond), rep.PerSecond(), rep.Seed, shardNote(rep.Shard, rep.Of))
	fmt.Fprintf(text, "\n%s\n", summary)
	for _, o := range rep.Failures {
		if o.Error != "" {
			// The engine could not run a generated schedule: the harness's
			// bug, not a verdict; the file is written as it was generated.
			path, _ := explore.Write(f.out, o.File)
			fmt.Fprintf(text, "  ERROR          schedule %d (%s, %s): %s -> %s\n", o.Index, o.Mode, o.Policy, o.Error, path)
		}
	}
	if !f.noShrink {
		for _, o := range rep.Distinct() {
			if o.Error != "" {
				continue
			}
			s, err := explore.ShrinkRandom(rep.Seed, o)
			if err != nil {
				fmt.Fprintf(text, "  %-14s schedule %d (%s, %s): %v\n", o.Verdict, o.Index, o.Mode, o.Policy, err)
				continue
			}
			path, err := explore.Write(f.out, s)
			if err != nil {
				fmt.Fprintln(stderr, "replay explore:", err)
				return exitUsage
			}
			fmt.Fprintf(text, "  %-14s schedule %d (%s, %s) -> %s (%d events, %d pods)\n", o.Verdict, o.Index, o.Mode, o.Policy, path, len(s.Timeline), len(s.Pods))
			if err := page.add(o.Verdict, fmt.Sprintf("schedule %d (%s, %s)", o.Index, o.Mode, o.Policy), path, s, o.Mode, o.Policy); err != nil {
				fmt.Fprintf(text, "  (%s is not drawn on the page: %v)\n", path, err)
			}
		}
	}
	if f.json != "" {
		if err := writeReportJSON(f.json, stdout, rep); err != nil {
			fmt.Fprintln(stderr, "replay explore:", err)
			return exitUsage
		}
	}
	if !page.write(rep.Matrix, []string{summary}, text, stderr) {
		return exitUsage
	}
	if rep.Failed() {
		return exitMismatch
	}
	return exitOK
}

// randomProgress counts on a terminal: schedules done, and of how many
// when the bound is a number.
func randomProgress(w io.Writer, opt explore.RandomOptions) func(int) {
	bar := progressBar(w)
	if bar == nil {
		return nil
	}
	if opt.Schedules > 0 && opt.Duration == 0 {
		return func(done int) { bar(done, opt.Schedules) }
	}
	var last atomic.Int64
	return func(done int) {
		if now := time.Now().Unix(); last.Swap(now) != now {
			fmt.Fprintf(w, "\r%d schedules", done)
		}
	}
}
