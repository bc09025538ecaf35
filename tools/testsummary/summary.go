package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Suite is one step of `make test` as the summary shows it.
type Suite struct {
	Name                    string
	Passed, Failed, Skipped int
	// NotSelected counts the Ginkgo specs a label or focus filter left
	// out on purpose (e2e's bench spec): they are not skips.
	NotSelected int
	Skips       []Item
	Failures    []Item
}

// Item is one skipped or failed test and why.
type Item struct{ Name, Why string }

func (s *Suite) pass() { s.Passed++ }

func (s *Suite) skip(name, why string) {
	s.Skipped++
	s.Skips = append(s.Skips, Item{name, oneLine(why)})
}

func (s *Suite) fail(name, why string) {
	s.Failed++
	s.Failures = append(s.Failures, Item{name, oneLine(why)})
}

// Load reads the reports of the suite arg names ("unit:gotest",
// "e2e:ginkgo", or a bare name for a step with only an exit status).
func Load(dir, arg string) Suite {
	name, kind, _ := strings.Cut(arg, ":")
	s := Suite{Name: name}
	code, err := readExit(filepath.Join(dir, name+".exit"))
	if err != nil {
		s.fail("", "no exit status, so the step never finished: "+err.Error())
		return s
	}
	switch kind {
	case "gotest":
		loadReport(&s, filepath.Join(dir, name+".gotest.json"), parseGoTest)
	case "ginkgo":
		loadReport(&s, filepath.Join(dir, name+".ginkgo.json"), parseGinkgo)
	case "":
		if code == 0 {
			s.pass()
		}
	default:
		s.fail("", "unknown report kind "+kind)
	}
	// A build error, a crash or a timeout can fail a step whose report
	// shows no failed test: the exit status is the last word.
	if code != 0 && s.Failed == 0 {
		s.fail("", fmt.Sprintf("exit status %d (see the step's output above)", code))
	}
	return s
}

func readExit(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func loadReport(s *Suite, path string, parse func(*Suite, []byte) error) {
	b, err := os.ReadFile(path)
	if err == nil {
		err = parse(s, b)
	}
	if err != nil {
		s.fail("", "no usable report: "+err.Error())
	}
}

// Total adds the suites up.
func Total(suites []Suite) Suite {
	t := Suite{Name: "total"}
	for _, s := range suites {
		t.Passed += s.Passed
		t.Failed += s.Failed
		t.Skipped += s.Skipped
	}
	return t
}

// maxFailures bounds the failures listed per suite: the suite's own output
// above has them all.
const maxFailures = 15

// Print writes the table: one line per suite, its skips (all of them) and
// failures under it, and last the total alone on its line.
func Print(w io.Writer, dir string, suites []Suite) {
	fmt.Fprintf(w, "\n== test summary (reports in %s)\n", dir)
	fmt.Fprintf(w, "%-18s %7s %7s %8s\n", "suite", "passed", "failed", "skipped")
	for _, s := range suites {
		line := fmt.Sprintf("%-18s %7d %7d %8d", s.Name, s.Passed, s.Failed, s.Skipped)
		if s.NotSelected > 0 {
			line += fmt.Sprintf("   (%d not selected by the label filter)", s.NotSelected)
		}
		fmt.Fprintln(w, line)
		for _, it := range s.Skips {
			fmt.Fprintf(w, "    SKIPPED %s\n", it)
		}
		for i, it := range s.Failures {
			if i == maxFailures {
				fmt.Fprintf(w, "    ... and %d more failures\n", len(s.Failures)-maxFailures)
				break
			}
			fmt.Fprintf(w, "    FAILED  %s\n", it)
		}
	}
	t := Total(suites)
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", t.Passed, t.Failed, t.Skipped)
}

func (it Item) String() string {
	if it.Name == "" {
		return it.Why
	}
	if it.Why == "" {
		return it.Name
	}
	return it.Name + ": " + it.Why
}

// oneLine keeps a reason on the summary's line: its lines joined, cut at
// a length a terminal shows.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	s = strings.Join(parts, " / ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "..."
	}
	return s
}
