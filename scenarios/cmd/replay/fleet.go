package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/vpccni/vpccni/scenarios/fleet"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

const fleetUsage = `replay fleet — many nodes in one VPC, checked at cluster scale

Usage:
  replay fleet [flags] FILE

FILE is a fleet file (scenarios/fleets/): node groups launched into one
in-memory VPC (an address one node gives back is the next another gets),
pods created and deleted at a rate, the cluster autoscaler draining nodes
(evicting aws-node first when misconfigured) and cancelling or terminating
them, ipamd restarting; all on one simulated clock, deterministic from the
file's seed. Each node is the node 'replay run' runs: kernel model, ipamd
on its own socket and checkpoint, the plugin through libcni.

Checked as it runs: no address held by two pods anywhere (an index, after
every event); every pod that got an address reachable from its node and
from every other node by the kernels' own route lookups (a rule leaked on
one node for an address now on another is a MISROUTE); every hour and at
the end every node in full (kernel clean of deleted pods, ipamd's
allocations) and EC2 (no ENI of a terminated node left beyond 10 minutes:
STRANDED).

Prints a summary table per run, a seed under a policy (nodes, pods, CNI calls, findings by
kind), each policy's first findings, and the report of the node of its
first finding (its kernel and last events). Exit 0 when every run gave
what the file expects, 1 otherwise, 2 on a bad flag or file.

Flags:
  --policy NAME   run only this policy (default: every policy the file expects)
  --seed N        replace the file's seed
  --seeds M       run M seeds: the seed, seed+1, ..., seed+M-1, each under
                  every policy (default 1); run i is seed-major, then the
                  policies in the file's order
  --shard K/N     run only the runs whose index is K-1 modulo N, for running
                  one fleet run on N machines (K may be job: a Kubernetes
                  Indexed Job's JOB_COMPLETION_INDEX plus one); needs --json;
                  'replay merge' combines the N files into exactly the
                  unsharded --json
  --json FILE     also write the results as JSON to FILE ("-": stdout, then
                  only JSON): the fleet, its file's SHA-256, the seeds, the
                  policies, the shard, and each run with its index
  --findings N    findings listed per run (default 10)
  --cpuprofile F  write a CPU profile of the runs to F (go tool pprof F)
  --memprofile F  write a heap profile at the end to F (go tool pprof F)

Each run's line says how long it took, its CNI calls per second of that
time, the heap then, and the process's peak resident memory so far.
A fleet allocates fast and keeps little: unless GOGC or GOMEMLIMIT is
set, replay fleet lets the heap grow to 17 times what is live before a
collection (GOGC=1600), within a soft memory limit of half the memory the
machine has available (at most 16 GiB), which the run's line states.
`

func runFleet(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay fleet", flag.ContinueOnError)
	pol := fs.String("policy", "", "")
	seed := fs.Int64("seed", 0, "")
	nSeeds := fs.Int("seeds", 1, "")
	shardFlag := fs.String("shard", "", "")
	jsonOut := fs.String("json", "", "")
	nFind := fs.Int("findings", 10, "")
	cpuProfile := fs.String("cpuprofile", "", "")
	memProfile := fs.String("memprofile", "", "")
	if code, ok := parseFlags(fs, args, func(w io.Writer) { fmt.Fprint(w, fleetUsage) }, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "replay fleet: want exactly one fleet FILE (replay fleet --help)")
		return exitUsage
	}
	shard, ok := shardOf("replay fleet", *shardFlag, stderr)
	if !ok {
		return exitUsage
	}
	if shard.N > 0 && *jsonOut == "" {
		fmt.Fprintln(stderr, "replay fleet: --shard needs --json FILE (\"-\": stdout): replay merge combines the shards' JSON files, and the text alone cannot be merged")
		return exitUsage
	}
	f, err := spec.LoadFleet(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "replay fleet: %v\n", err)
		return exitUsage
	}
	if *seed != 0 {
		f.Seed = *seed
	}
	seeds, err := seedRange(f.Seed, *nSeeds)
	if err != nil {
		fmt.Fprintf(stderr, "replay fleet: %v\n", err)
		return exitUsage
	}
	pols := f.Policies()
	if *pol != "" {
		if _, ok := f.Expect[*pol]; !ok {
			fmt.Fprintf(stderr, "replay fleet: %s expects nothing of policy %q (it names: %s)\n", f.Name, *pol, strings.Join(pols, ", "))
			return exitUsage
		}
		pols = []string{*pol}
	}
	// Every policy is known before the first run: a bad one found after an
	// hour of runs would waste them.
	byName := map[string]policy.Policy{}
	for _, pn := range pols {
		p, err := policy.ByName(pn)
		if err != nil {
			fmt.Fprintf(stderr, "replay fleet: %v\n", err)
			return exitUsage
		}
		byName[pn] = p
	}
	out := stdout
	if *jsonOut == "-" {
		out = io.Discard
	}
	rep := &fleetReport{Fleet: f.Name, SHA256: f.SHA256, Seeds: seeds, Policies: pols, Runs: []fleetRun{}}
	if shard.N > 0 {
		rep.Shard = &shard
	}
	setFleetGC()
	stopProfiles, err := startProfiles(*cpuProfile, *memProfile)
	if err != nil {
		fmt.Fprintf(stderr, "replay fleet: %v\n", err)
		return exitUsage
	}
	var mine []int
	for i := range rep.runs() {
		if shard.Owns(i) {
			mine = append(mine, i)
		}
	}
	for _, i := range mine {
		g := *f
		var pn string
		g.Seed, pn = rep.planned(i)
		res, err := runOne(out, stderr, &g, byName[pn], *nFind)
		if err != nil {
			fmt.Fprintf(stderr, "replay fleet: %s under %s (seed %d): %v\n", f.Name, pn, g.Seed, err)
			return exitMismatch
		}
		rep.Runs = append(rep.Runs, fleetRun{Index: i, Result: res})
	}
	if err := stopProfiles(); err != nil {
		fmt.Fprintf(stderr, "replay fleet: %v\n", err)
		return exitUsage
	}
	printFleetTable(out, rep.results())
	if rep.Shard != nil {
		fmt.Fprintf(out, "\nshard %s: runs %s of %d (replay merge combines the shards)\n", rep.Shard, indexList(mine), rep.runs())
	}
	if *jsonOut != "" {
		if err := writeReportJSON(*jsonOut, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "replay fleet: --json: %v\n", err)
			return exitUsage
		}
	}
	if rep.failed() {
		return exitMismatch
	}
	return exitOK
}

// runOne runs the fleet f (its seed set) under p once, printing the run's
// time, heap and first findings to out.
func runOne(out, stderr io.Writer, f *spec.Fleet, p policy.Policy, nFind int) (*fleet.Result, error) {
	fmt.Fprintf(out, "== %s under %s (seed %d, %s)\n", f.Name, p.Name(), f.Seed, f.Duration)
	bar := progressBar(stderr)
	start := time.Now()
	logged := time.Duration(0)
	res, err := fleet.Run(f, p, fleet.Options{Progress: func(done, total time.Duration) {
		if bar != nil {
			bar(int(done/time.Second), int(total/time.Second))
			return
		}
		// Not a terminal (make fleet's log): a line per simulated hour.
		if h := done.Truncate(time.Hour); h > logged && done < total {
			logged = h
			fmt.Fprintf(stderr, "replay fleet: %s under %s: %s of %s simulated after %s\n", f.Name, p.Name(), h, total, time.Since(start).Round(time.Second))
		}
	}})
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	calls := 0
	for _, n := range res.Calls {
		calls += n
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(out, "   took %s, %d CNI calls (%.0f/s), heap %d MiB, peak RSS %d MiB (%s); checkpoints on %s\n",
		took.Round(time.Millisecond), calls, float64(calls)/took.Seconds(), ms.HeapAlloc>>20, peakRSS()>>20, gcSetting(), scratch())
	printFindings(out, res, nFind)
	return res, nil
}

// scratch is where the nodes' sockets and checkpoints live.
func scratch() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm (memory)"
	}
	return os.TempDir()
}

func printFindings(w io.Writer, r *fleet.Result, n int) {
	for i, fd := range r.Findings {
		if i == n {
			fmt.Fprintf(w, "   … %d more (--findings N, --json)\n", len(r.Findings)-n)
			break
		}
		node := fd.Node
		if node == "" {
			node = "EC2"
		}
		fmt.Fprintf(w, "   t=%-10s %-10s %s: %s\n", fd.At.Round(time.Second), node, fd.Kind, fd.What)
	}
	if r.First == nil {
		return
	}
	fmt.Fprintf(w, "   first finding, on node %s at t=%s: %s\n   its last events:\n", r.First.Node, r.First.At, r.First.Finding)
	for _, l := range r.First.Recent {
		fmt.Fprintf(w, "     %s\n", l)
	}
	fmt.Fprintf(w, "   its kernel:\n")
	for _, l := range r.First.Kernel {
		fmt.Fprintf(w, "     %s\n", l)
	}
}

func printFleetTable(w io.Writer, rs []*fleet.Result) {
	sw := len("seed")
	for _, r := range rs {
		sw = max(sw, len(fmt.Sprint(r.Seed)))
	}
	fmt.Fprintf(w, "\n%-*s %-12s %6s %6s %6s %8s %8s  %-8s %s\n", sw, "seed", "policy", "nodes", "pods", "drains", "ADD", "DEL", "expected", "findings")
	for _, r := range rs {
		var parts []string
		for _, k := range append(append([]string{}, invariant.Severity...), fleet.Stranded) {
			if c := r.ByKind[k]; c > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, c))
			}
		}
		found := "clean"
		if len(parts) > 0 {
			found = strings.Join(parts, ", ")
		}
		mark := "as expected"
		if !r.Match {
			mark = "NOT as expected (" + strings.Join(r.Expected, ", ") + ")"
		}
		fmt.Fprintf(w, "%-*d %-12s %6d %6d %6d %8d %8d  %-8s %s — %s\n", sw, r.Seed, r.Policy, r.Nodes, r.Pods, r.Drains, r.Calls["ADD"], r.Calls["DEL"],
			strings.Join(r.Expected, ","), found, mark)
	}
}
