// Command testsummary is how `make test` makes a skip or a failure
// impossible to miss: every suite leaves a report in bin/reports, and the
// summary prints one line per suite with its passed, failed and skipped
// counts, each skip's reason and each failure under it, and last the
// plain total `N passed, M failed, K skipped` (CI reads that line).
//
//	testsummary gotest -o FILE -- go test -json ARGS...
//	testsummary report -dir DIR SUITE[:KIND]...
//
// gotest runs the command, keeps its JSON in FILE and prints what a plain
// `go test` would (package lines, the output of failing tests) plus each
// skip with its reason; it exits with the command's status.
//
// report reads, for each SUITE, DIR/SUITE.exit (the step's exit status,
// written by the Makefile) and, by KIND, DIR/SUITE.gotest.json (gotest)
// or DIR/SUITE.ginkgo.json (ginkgo --json-report); a suite without a KIND
// counts as one step that passed or failed. A report that is missing
// counts as a failure. It exits 1 if anything failed.
//
// A developer tool: no shipped binary imports it.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "gotest":
		fs := flag.NewFlagSet("gotest", flag.ExitOnError)
		out := fs.String("o", "", "file to keep the JSON stream in")
		fs.Parse(os.Args[2:])
		if *out == "" || fs.NArg() == 0 {
			usage()
		}
		os.Exit(runGoTest(*out, fs.Args()))
	case "report":
		fs := flag.NewFlagSet("report", flag.ExitOnError)
		dir := fs.String("dir", "bin/reports", "directory of the reports")
		fs.Parse(os.Args[2:])
		if fs.NArg() == 0 {
			usage()
		}
		var suites []Suite
		for _, arg := range fs.Args() {
			suites = append(suites, Load(*dir, arg))
		}
		Print(os.Stdout, *dir, suites)
		if Total(suites).Failed > 0 {
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testsummary gotest -o FILE -- go test -json ARGS...\n       testsummary report [-dir DIR] SUITE[:gotest|:ginkgo]...")
	os.Exit(2)
}
