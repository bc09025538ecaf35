// Command replay runs scenario files on the kernel model and checks each
// outcome against the file's expectation per delete policy.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/report"
	"github.com/vpccni/vpccni/scenarios/report/htmlreport"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Exit codes.
const (
	exitOK       = 0 // every outcome matched its expectation
	exitMismatch = 1 // at least one outcome did not
	exitUsage    = 2 // a bad flag or scenario file
)

func usage(w io.Writer) {
	fmt.Fprintf(w, `replay — run vpccni scenarios on the kernel model

Usage:
  replay run [flags] FILE...
  replay explore [flags] TEMPLATE    (replay explore --help)
  replay explore --random [flags]    generated compound-fault timelines
  replay journal [flags] FILE...     (replay journal --help)
  replay fleet [flags] FILE          many nodes in one VPC (replay fleet --help)
  replay merge [--json FILE] SHARD.json...   the shards of 'replay explore|fleet --shard K/N'
  replay failpoints

Each scenario file describes a node, its pods and a timeline (add, delete,
evict aws-node, cancel the eviction, wait, settle). replay runs it once per
mode in its "modes" list and per delete policy in its "expect" map: on the
in-memory kernel model with ipamd serving gRPC on a real Unix socket in a
temporary directory and the vpc-cni plugin driven through libcni. It prints
the timeline with the node's kernel diff at each step (each DEL attempt
with ipamd's answer and what the DEL did), the invariant findings and the
node audit's (package audit, from what vpccni-audit reads on a node; the
two must agree, AUDIT-DISAGREES otherwise), then a table scenario x mode x
policy: clean, or LEAK / BROKEN / MISROUTE / IPAM / DOUBLE-ASSIGN / STUCK
with the objects found, and a total line:

  129/129 cells as expected; vpccni (default) clean everywhere; 1/1 journal replayed clean

The scenario marked "headline: true" runs first and heads the table,
whatever the order of the files; the others run in the order given, each
under vpccni's flow first, then the reference's in release order.

A FILE ending in .jsonl is a vpc-cni invocation journal: after the
scenarios, run replays it as 'replay journal' does, with vpccni's flow, and
counts it clean or not (one more row of the table, policy default, mode
"journal").

No root, no cloud: nothing outside the process is touched.

Delete policies:
`)
	for _, p := range policy.All {
		fmt.Fprintf(w, "  %-12s %s\n", p.Name(), p.Describe())
	}
	fmt.Fprintf(w, `
Flags:
  --policy NAME   run only this policy (default: every policy the file expects;
                  journals replay with default, so another policy skips them)
  --mode NAME     run only this mode (default: every mode of the file; known:
                  %s; a journal has mode "journal")
  --json FILE     also write the results as JSON to FILE ("-" for stdout, which
                  then carries only the JSON): runs, journals, summary
  --html FILE     also write the report as one self-contained HTML page:
                  per cell a timeline of the node's kernel objects, a lane
                  per pod, ipamd's ups and downs, each DEL with ipamd's
                  answer, leaks and misroutes in colour with their findings
  --quiet         print only the table and the total line
  --verbose       include ipamd's and the plugin's logs (stderr)

Exit status: 0 when every outcome matches its expectation and every
journal replays clean, 1 when one does not, 2 for a bad flag, scenario file
or journal (nothing is run then).
`, strings.Join(spec.KnownModes, ", "))
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "run":
		return runScenarios(args[1:], stdout, stderr)
	case "explore":
		return runExplore(args[1:], stdout, stderr)
	case "failpoints":
		return runFailpoints(stdout)
	case "journal":
		return runJournal(args[1:], stdout, stderr)
	case "fleet":
		return runFleet(args[1:], stdout, stderr)
	case "merge":
		return runMerge(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "replay: unknown command %q (try: replay run FILE...; replay explore TEMPLATE; replay journal FILE...; replay --help)\n", args[0])
	return exitUsage
}

// parseFlags parses a command's flags. --help prints the command's usage
// once, on stdout (exit 0); a bad flag is named on stderr with where to
// look (exit 2). ok is false when the command is to stop with code.
func parseFlags(fs *flag.FlagSet, args []string, usage func(io.Writer), stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // the flag package's own call; printed below, once
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK, false
		}
		fmt.Fprintf(stderr, "(%s --help lists the flags)\n", fs.Name())
		return exitUsage, false
	}
	return exitOK, true
}

// isJournal says whether a FILE of replay run is a journal.
func isJournal(file string) bool { return strings.HasSuffix(file, ".jsonl") }

func runScenarios(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay run", flag.ContinueOnError)
	pol := fs.String("policy", "", "")
	mode := fs.String("mode", "", "")
	jsonOut := fs.String("json", "", "")
	htmlOut := fs.String("html", "", "")
	quiet := fs.Bool("quiet", false, "")
	verbose := fs.Bool("verbose", false, "")
	if code, ok := parseFlags(fs, args, usage, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "replay run: no scenario file given")
		return exitUsage
	}
	if *pol != "" {
		if _, err := policy.ByName(*pol); err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitUsage
		}
	}
	// Everything is read before anything runs: a bad file stops the run
	// before a line of output.
	var scenarios []*spec.Scenario
	type journalFile struct {
		file    string
		entries []journal.Entry
	}
	var journals []journalFile
	withJournals := (*pol == "" || *pol == (policy.Default{}).Name()) && (*mode == "" || *mode == "journal")
	for _, f := range fs.Args() {
		if isJournal(f) {
			entries, err := readJournal(f)
			if err != nil {
				fmt.Fprintf(stderr, "replay: %s: %v\n", f, err)
				return exitUsage
			}
			if withJournals {
				journals = append(journals, journalFile{f, entries})
			}
			continue
		}
		s, err := spec.Load(f)
		if err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitUsage
		}
		scenarios = append(scenarios, s)
	}
	htmlFile, ok := openHTML(*htmlOut, stderr)
	if !ok {
		return exitUsage
	}
	// The headline first; the rest as given.
	sort.SliceStable(scenarios, func(i, j int) bool { return scenarios[i].Headline && !scenarios[j].Headline })
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	opt := engine.Options{}
	var log *slog.Logger
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opt.Log = log
	}
	var results []*engine.Result
	for _, s := range scenarios {
		for _, m := range s.Modes {
			if *mode != "" && m != *mode {
				continue
			}
			for _, pn := range policyOrder(s.Policies()) {
				if *pol != "" && pn != *pol {
					continue
				}
				p, err := policy.ByName(pn)
				if err != nil {
					fmt.Fprintf(stderr, "replay: %s: expect: %v\n", s.File, err)
					return exitUsage
				}
				res, err := engine.Run(s, m, p, opt)
				if err != nil {
					fmt.Fprintln(stderr, "replay:", err)
					return exitUsage
				}
				if !*quiet {
					report.Timeline(text, res)
				}
				results = append(results, res)
			}
		}
	}
	var replayed []report.JournalRun
	for _, j := range journals {
		r, err := playback.Play(j.entries, playback.Options{Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "replay: %s: %v\n", j.file, err)
			return exitUsage
		}
		if !*quiet {
			report.Journal(text, j.file, r, false)
		}
		replayed = append(replayed, report.JournalRun{File: j.file, Report: r})
	}
	if len(results)+len(replayed) == 0 {
		fmt.Fprintln(stderr, "replay: nothing to run (check --mode and --policy against the files)")
		return exitUsage
	}
	sum := report.Summarize(results, replayed)
	report.Table(text, results, replayed)
	report.Total(text, sum)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, stdout, results, replayed); err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitUsage
		}
	}
	if htmlFile != nil {
		page := &htmlreport.Page{Title: "vpccni scenario replay", Lines: []string{sum.String()}}
		for _, r := range results {
			page.AddRun(r)
		}
		for _, j := range replayed {
			page.AddJournal(j)
		}
		if !writeHTML(htmlFile, page, text, stderr) {
			return exitUsage
		}
	}
	if !sum.OK() {
		return exitMismatch
	}
	return exitOK
}

// policyOrder puts a file's policies in the order of policy.All: vpccni's
// flow first, then the reference's in release order.
func policyOrder(names []string) []string {
	rank := map[string]int{}
	for i, p := range policy.All {
		rank[p.Name()] = i
	}
	out := slices.Clone(names)
	sort.SliceStable(out, func(i, j int) bool {
		ri, iok := rank[out[i]]
		rj, jok := rank[out[j]]
		if iok != jok {
			return iok // an unknown name last (it is refused when run)
		}
		return ri < rj
	})
	return out
}

func writeJSON(path string, stdout io.Writer, rs []*engine.Result, js []report.JournalRun) error {
	return writeOut(path, stdout, func(w io.Writer) error { return report.JSON(w, rs, js) })
}
