package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/spec"
)

const exploreUsage = `Usage:
  replay explore [flags] TEMPLATE
  replay explore --random [flags]     (generated timelines; see below)
  replay failpoints

explore enumerates the fault space of a scenario template: it runs the
template once per mode and delete policy to learn which failpoints it
reaches and how often, then runs every schedule — one failpoint × one of
its occurrences × crash, error or hang × mode × policy × what a restarted
ipamd finds of its checkpoint (kept, lost, corrupt) — on the kernel model,
in parallel. It prints, per policy and mode, how many schedules came out
clean and how many showed LEAK, DOUBLE-ASSIGN, STUCK, MISROUTE, BROKEN or
IPAM (the most serious kind each). Each distinct failure (policy, mode,
failpoint, action, verdict) is shrunk to the fewest events and pods that
still show it and written to the output folder as a scenario file that
'replay run' reproduces. failpoints lists every failpoint of this build.

Flags:
  --out DIR             where to write the counterexamples (default explore-out)
  --mode LIST           modes, comma-separated (default: the template's)
  --policy LIST         delete policies (default: all)
  --action LIST         crash, error, hang (default: all)
  --memory LIST         kept, lost, corrupt (default: all)
  --max-occurrences N   try at most N occurrences of each failpoint (default: all)
  --workers N           schedules run at once (default: GOMAXPROCS)
  --no-shrink           count only; write no counterexamples
  --json FILE           write every outcome as JSON ("-": stdout, which then
                        carries only the JSON)
  --html FILE           also write one self-contained HTML page: the matrix
                        as a heat map (policy × mode), each shrunk
                        counterexample linked and replayed as a timeline
  --shard K/N           run only the schedules whose index is K-1 modulo N,
                        for running one exploration on N machines (with
                        --random, bounded by --schedules only); their --json
                        files combine with 'replay merge' into exactly the
                        unsharded result; K may be the word job: a
                        Kubernetes Indexed Job's JOB_COMPLETION_INDEX plus
                        one (deploy/explore/explore-job.yaml)

--random generates timelines instead of enumerating one template's
single faults: from a seed, each schedule is a node (sometimes with
another agent's rules, sometimes ipamd's reconciler at its shortest
grace), a few pods and a timeline of the moves that, combined, break a
delete flow: pods deleted and recreated under the same name, containerd's
second DEL arriving late, DELs with forged prevResults, force deletes
without a cached result, a runtime that loses sandboxes and GCs, ipamd
evicted, killed, hung or restarted with its checkpoint kept, lost or
corrupt or with a bad setting, several failpoints, waits past the
cooldown, addresses taken by pods of other nodes. Schedules go round the
modes (and policies); the double assignment and release-before-teardown
invariants are checked after every step, the others at the end. Each
distinct failure (policy, mode, verdict) is shrunk to the fewest events
and pods that still show it and written to --out. The seed, index and
mode name a schedule for good: the same seed gives the same schedules.

Flags of --random (with --out, --mode, --policy, --workers, --no-shrink,
--json above; --policy defaults to vpccni's own flow):
  --seed N              the seed (default: a fresh one, printed first)
  --schedules N         stop after N schedules (default 2000 unless --for)
  --for DURATION        stop after this long (e.g. 30m); with --schedules,
                        whichever comes first

Exit status: 0 when the default policy is clean on the whole space (every
generated schedule), 1 when it is not (the explorer found a bug in vpccni:
the counterexample replays it), 2 for a bad flag or template.
`

func list(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func runFailpoints(stdout io.Writer) int {
	for _, p := range failpoint.All() {
		fmt.Fprintf(stdout, "%-40s %s\n", p.Name, p.Desc)
	}
	return exitOK
}

func runExplore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay explore", flag.ContinueOnError)
	out := fs.String("out", "explore-out", "")
	modes := fs.String("mode", "", "")
	pols := fs.String("policy", "", "")
	actions := fs.String("action", "", "")
	memories := fs.String("memory", "", "")
	maxOcc := fs.Int("max-occurrences", 0, "")
	workers := fs.Int("workers", 0, "")
	noShrink := fs.Bool("no-shrink", false, "")
	jsonOut := fs.String("json", "", "")
	htmlOut := fs.String("html", "", "")
	random := fs.Bool("random", false, "")
	seed := fs.String("seed", "", "")
	schedules := fs.Int("schedules", 0, "")
	forDur := fs.Duration("for", 0, "")
	shardFlag := fs.String("shard", "", "")
	if code, ok := parseFlags(fs, args, func(w io.Writer) { fmt.Fprint(w, exploreUsage) }, stdout, stderr); !ok {
		return code
	}
	shard, ok := shardOf("replay explore", *shardFlag, stderr)
	if !ok {
		return exitUsage
	}
	if *htmlOut != "" && *noShrink {
		fmt.Fprintln(stderr, "replay explore: --html draws the shrunk counterexamples: not with --no-shrink")
		return exitUsage
	}
	if *random {
		if *actions != "" || *memories != "" || *maxOcc != 0 || fs.NArg() != 0 {
			fmt.Fprintln(stderr, "replay explore --random: takes no template, --action, --memory or --max-occurrences (it draws them)")
			return exitUsage
		}
		return runRandom(randomFlags{seed: *seed, schedules: *schedules, duration: *forDur, modes: list(*modes),
			policies: list(*pols), workers: *workers, out: *out, noShrink: *noShrink, json: *jsonOut, html: *htmlOut, shard: shard}, stdout, stderr)
	}
	if *seed != "" || *schedules != 0 || *forDur != 0 {
		fmt.Fprintln(stderr, "replay explore: --seed, --schedules and --for go with --random")
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "replay explore: give exactly one template file")
		return exitUsage
	}
	t, err := spec.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "replay:", err)
		return exitUsage
	}
	opt := explore.Options{Modes: list(*modes), Policies: list(*pols), Memories: list(*memories), MaxOccurrences: *maxOcc, Workers: *workers, Shard: shard}
	for _, a := range list(*actions) {
		if !slices.Contains(failpoint.Actions, failpoint.Action(a)) {
			fmt.Fprintf(stderr, "replay explore: --action %q: want crash, error or hang\n", a)
			return exitUsage
		}
		opt.Actions = append(opt.Actions, failpoint.Action(a))
	}
	for _, m := range opt.Memories {
		if !slices.Contains(spec.KnownMemory, m) {
			fmt.Fprintf(stderr, "replay explore: --memory %q: want kept, lost or corrupt\n", m)
			return exitUsage
		}
	}
	for _, m := range opt.Modes {
		if !slices.Contains(t.Modes, m) {
			fmt.Fprintf(stderr, "replay explore: --mode %q is not one of the template's (%s)\n", m, strings.Join(t.Modes, ", "))
			return exitUsage
		}
	}
	htmlFile, ok := openHTML(*htmlOut, stderr)
	if !ok {
		return exitUsage
	}
	page := newExplorePage(htmlFile, "vpccni explore: "+t.Name)
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	// Thousands of short runs allocate far more than they keep: collect
	// less often (about a third faster here).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	start := time.Now()
	scheds, err := explore.Enumerate(t, opt)
	if err != nil {
		fmt.Fprintln(stderr, "replay explore:", err)
		return exitUsage
	}
	opt.Progress = progressBar(stderr)
	rep, err := explore.Run(t, scheds, opt)
	if err != nil {
		fmt.Fprintln(stderr, "\nreplay explore:", err)
		return exitUsage
	}
	took := time.Since(start)
	printMatrix(text, rep.Matrix())
	summary := fmt.Sprintf("%d schedules in %s (%.0f/s)%s", rep.Schedules, took.Round(time.Millisecond), float64(rep.Schedules)/took.Seconds(), shardNote(rep.Shard, len(scheds)))
	fmt.Fprintf(text, "\n%s\n", summary)
	if !*noShrink {
		for _, o := range rep.Failures() {
			f, err := explore.Shrink(t, o)
			if err != nil {
				fmt.Fprintf(text, "  %-14s %s: %v\n", o.Verdict, o.Schedule, err)
				continue
			}
			path, err := explore.Write(*out, f)
			if err != nil {
				fmt.Fprintln(stderr, "replay explore:", err)
				return exitUsage
			}
			fmt.Fprintf(text, "  %-14s %s -> %s (%d events, %d pods)\n", o.Verdict, o.Schedule, path, len(f.Timeline), len(f.Pods))
			if err := page.add(o.Verdict, o.Schedule.String(), path, f, o.Mode, o.Policy); err != nil {
				fmt.Fprintf(text, "  (%s is not drawn on the page: %v)\n", path, err)
			}
		}
	}
	if *jsonOut != "" {
		if err := writeReportJSON(*jsonOut, stdout, rep); err != nil {
			fmt.Fprintln(stderr, "replay explore:", err)
			return exitUsage
		}
	}
	if !page.write(rep.Matrix(), []string{"template " + t.File, summary}, text, stderr) {
		return exitUsage
	}
	for _, o := range rep.Outcomes {
		if o.Policy == "default" && o.Failed() {
			return exitMismatch
		}
	}
	return exitOK
}

// printMatrix prints one line per policy and mode: the schedules by
// verdict, the most serious kinds first.
func printMatrix(w io.Writer, m explore.Matrix) {
	pols := make([]string, 0, len(m))
	for p := range m {
		pols = append(pols, p)
	}
	sort.Strings(pols)
	fmt.Fprintf(w, "%-12s %-20s %s\n", "POLICY", "MODE", "SCHEDULES")
	for _, p := range pols {
		modes := make([]string, 0, len(m[p]))
		for md := range m[p] {
			modes = append(modes, md)
		}
		sort.Strings(modes)
		for _, md := range modes {
			c := m[p][md]
			var parts []string
			for _, k := range append([]string{"clean"}, invariant.Severity...) {
				if c[k] > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
				}
			}
			fmt.Fprintf(w, "%-12s %-20s %s\n", p, md, strings.Join(parts, ", "))
		}
	}
}

// progressBar draws on a terminal only; a pipe or file gets nothing.
func progressBar(w io.Writer) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var mu sync.Mutex
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		const width = 40
		n := done * width / total
		fmt.Fprintf(w, "\r[%s%s] %d/%d", strings.Repeat("=", n), strings.Repeat(" ", width-n), done, total)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}
