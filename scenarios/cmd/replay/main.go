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
	"strings"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/report"
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
  replay journal [flags] FILE...     (replay journal --help)
  replay failpoints

Each scenario file describes a node, its pods and a timeline (add, delete,
evict aws-node, cancel the eviction, wait, settle). replay runs it once per
mode in its "modes" list and per delete policy in its "expect" map: on the
in-memory kernel model with ipamd serving gRPC on a real Unix socket in a
temporary directory and the vpc-cni plugin driven through libcni. It prints
the timeline with the node's kernel diff at each step, the invariant
findings, then a table scenario x mode x policy: clean, or LEAK / BROKEN /
MISROUTE / IPAM / DOUBLE-ASSIGN / STUCK with the objects found.

No root, no cloud: nothing outside the process is touched.

Delete policies:
`)
	for _, p := range policy.All {
		fmt.Fprintf(w, "  %-12s %s\n", p.Name(), p.Describe())
	}
	fmt.Fprintf(w, `
Flags:
  --policy NAME   run only this policy (default: every policy the file expects)
  --mode NAME     run only this mode (default: every mode of the file; known: %s)
  --json FILE     also write the results as JSON to FILE ("-" for stdout, which
                  then carries only the JSON)
  --quiet         print only the table
  --verbose       include ipamd's and the plugin's logs (stderr)

Exit status: 0 when every outcome matches its expectation, 1 when one does
not, 2 for a bad flag or scenario file.
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
	case "explore":
		return runExplore(args[1:], stdout, stderr)
	case "failpoints":
		return runFailpoints(stdout)
	case "journal":
		return runJournal(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "replay: unknown command %q (try: replay run FILE...; replay explore TEMPLATE; replay journal FILE...; replay --help)\n", args[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("replay run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	pol := fs.String("policy", "", "")
	mode := fs.String("mode", "", "")
	jsonOut := fs.String("json", "", "")
	quiet := fs.Bool("quiet", false, "")
	verbose := fs.Bool("verbose", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
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
	var scenarios []*spec.Scenario
	for _, f := range fs.Args() {
		s, err := spec.Load(f)
		if err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitUsage
		}
		scenarios = append(scenarios, s)
	}
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	opt := engine.Options{}
	if *verbose {
		opt.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var results []*engine.Result
	for _, s := range scenarios {
		for _, m := range s.Modes {
			if *mode != "" && m != *mode {
				continue
			}
			for _, pn := range s.Policies() {
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
	if len(results) == 0 {
		fmt.Fprintln(stderr, "replay: nothing to run (check --mode and --policy against the files)")
		return exitUsage
	}
	report.Table(text, results)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, stdout, results); err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitUsage
		}
	}
	for _, r := range results {
		if !r.Match {
			return exitMismatch
		}
	}
	return exitOK
}

func writeJSON(path string, stdout io.Writer, rs []*engine.Result) error {
	if path == "-" {
		return report.JSON(stdout, rs)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.JSON(f, rs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
