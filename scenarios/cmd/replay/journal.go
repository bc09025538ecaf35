package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/report"
	"github.com/vpccni/vpccni/scenarios/report/htmlreport"
)

const journalUsage = `Usage:
  replay journal [flags] FILE...

journal replays a vpc-cni invocation journal on the kernel model. A
journal is what vpc-cni appends to the file its network configuration
names in "journalFile": one JSON line per ADD, DEL, CHECK, GC and STATUS,
with the CNI environment, stdin (with the prevResult), the result or the
CNI error, the duration, and every call to ipamd with its answer.

Each invocation runs again through the plugin's own code on a model node,
with ipamd's recorded answers, and with each pod namespace present or gone
as the recorded invocation found it. replay prints each invocation with
what was recorded and what the replay did, and its kernel diff; then the
pods (live, deleted, pending: a failed ADD or DEL the runtime retries),
ipamd's accounting (addresses assigned, released, still held), the kernel
objects the journal's invocations left, and the verdict: LEAK (an object
of a deleted pod remains), BROKEN (a live pod lacks one), MISROUTE (traffic
to a live pod does not reach it), DOUBLE-ASSIGN, IPAM (ipamd released a
live pod's address), DIVERGED (vpccni's flow did not do what the journal
recorded: the model and the recording node disagree, or the code changed),
or clean.

The replay writes nothing but its output: the journal's pluginLogFile and
journalFile are dropped from each stdin. Nothing outside the process is
touched; no root is needed.

Flags:
  --policy NAME   run each DEL with this delete policy (default: default,
                  vpccni's flow); a legacy policy shows what the reference's
                  DEL would have done with the same calls and ipamd answers
                  (divergences are then expected; the verdict is the
                  invariants')
  --json FILE     also write the reports as JSON to FILE ("-": stdout, which
                  then carries only the JSON)
  --html FILE     also write one self-contained HTML page: per journal a
                  timeline of the node's kernel objects (a column per
                  invocation, a lane per pod), each DEL with ipamd's
                  answer, leaks in colour with their findings
  --quiet         leave out each invocation's kernel diff
  --verbose       include the plugin's log (stderr)

Exit status: 0 when every journal replays clean, 1 when one does not, 2
for a bad flag or a journal that cannot be read (the line is named).
`

func runJournal(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay journal", flag.ContinueOnError)
	pol := fs.String("policy", "default", "")
	jsonOut := fs.String("json", "", "")
	htmlOut := fs.String("html", "", "")
	quiet := fs.Bool("quiet", false, "")
	verbose := fs.Bool("verbose", false, "")
	if code, ok := parseFlags(fs, args, func(w io.Writer) { fmt.Fprint(w, journalUsage) }, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "replay journal: no journal file given (replay journal --help)")
		return exitUsage
	}
	p, err := policy.ByName(*pol)
	if err != nil {
		fmt.Fprintln(stderr, "replay journal:", err)
		return exitUsage
	}
	opt := playback.Options{Policy: p}
	if *verbose {
		opt.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	htmlFile, ok := openHTML(*htmlOut, stderr)
	if !ok {
		return exitUsage
	}
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	var reports []*playback.Report
	for _, file := range fs.Args() {
		entries, err := readJournal(file)
		if err != nil {
			fmt.Fprintf(stderr, "replay journal: %s: %v\n", file, err)
			return exitUsage
		}
		r, err := playback.Play(entries, opt)
		if err != nil {
			fmt.Fprintf(stderr, "replay journal: %s: %v\n", file, err)
			return exitUsage
		}
		report.Journal(text, file, r, *quiet)
		reports = append(reports, r)
	}
	if *jsonOut != "" {
		if err := writeJournalJSON(*jsonOut, stdout, fs.Args(), reports); err != nil {
			fmt.Fprintln(stderr, "replay journal:", err)
			return exitUsage
		}
	}
	if htmlFile != nil {
		page := &htmlreport.Page{Title: "vpccni journal replay, policy " + p.Name()}
		for i, r := range reports {
			page.AddJournal(report.JournalRun{File: fs.Arg(i), Report: r})
		}
		if !writeHTML(htmlFile, page, text, stderr) {
			return exitUsage
		}
	}
	for _, r := range reports {
		if r.Verdict() != "clean" {
			return exitMismatch
		}
	}
	return exitOK
}

func readJournal(file string) ([]journal.Entry, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := journal.Read(f)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, errors.New("the journal has no entries")
	}
	return es, nil
}

func writeJournalJSON(path string, stdout io.Writer, files []string, rs []*playback.Report) error {
	return writeOut(path, stdout, func(w io.Writer) error { return report.JournalJSON(w, files, rs) })
}
