// Package report prints scenario runs: the timeline with the kernel diff of
// each step, the table scenario × mode × policy (and the journals
// replayed with them), its total line, and the same as JSON.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// Timeline writes one run's steps and findings.
func Timeline(w io.Writer, r *engine.Result) {
	title := r.Scenario
	if r.Incident != "" {
		title += " (" + r.Incident + ")"
	}
	fmt.Fprintf(w, "=== %s  mode=%s  policy=%s\n", title, r.Mode, r.Policy)
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  t=%-6s %s\n", s.At, s.Event)
		changes(w, s.Notes, s.Added, s.Removed)
	}
	if len(r.Violations) == 0 {
		fmt.Fprintf(w, "  verdict: clean\n")
	} else {
		fmt.Fprintf(w, "  verdict: %s\n", strings.Join(r.Kinds, "+"))
		for _, v := range r.Violations {
			fmt.Fprintf(w, "    %s\n", v)
		}
	}
	fmt.Fprintf(w, "  expected %s: %s\n\n", r.Expected, okWord(r.Match))
}

// changes writes a step's notes and kernel diff.
func changes(w io.Writer, notes, added, removed []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "           . %s\n", n)
	}
	for _, a := range added {
		fmt.Fprintf(w, "           + %s\n", a)
	}
	for _, d := range removed {
		fmt.Fprintf(w, "           - %s\n", d)
	}
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISMATCH"
}

// Cell is the verdict as the table shows it: clean, or the kinds found
// with the objects of the first few findings.
func Cell(r *engine.Result) string {
	if len(r.Violations) == 0 {
		return "clean"
	}
	return strings.Join(r.Kinds, "+") + " (" + objects(r.Violations) + ")"
}

// objects lists the objects of the first few findings.
func objects(vs []invariant.Violation) string {
	var what []string
	for i, v := range vs {
		if i == 3 {
			what = append(what, fmt.Sprintf("+%d more", len(vs)-3))
			break
		}
		what = append(what, v.What)
	}
	return strings.Join(what, "; ")
}

// JournalRun is a journal replayed by `replay run`: one more row of its
// table, expected clean.
type JournalRun struct {
	File   string
	Report *playback.Report
}

// Name is the journal's file name without its directory and extension.
func (j JournalRun) Name() string {
	return strings.TrimSuffix(filepath.Base(j.File), filepath.Ext(j.File))
}

// Clean reports whether the journal replayed clean.
func (j JournalRun) Clean() bool { return j.Report.Verdict() == "clean" }

// got is the journal's verdict as the table shows it.
func (j JournalRun) got() string {
	v := j.Report.Verdict()
	if len(j.Report.Violations) == 0 {
		if v == "DIVERGED" {
			return fmt.Sprintf("DIVERGED (%d invocations did not do what was recorded)", j.Report.Divergences)
		}
		return v
	}
	return v + " (" + objects(j.Report.Violations) + ")"
}

// Table writes one row per run, then one per journal.
func Table(w io.Writer, rs []*engine.Result, js []JournalRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMODE\tPOLICY\tEXPECTED\tRESULT\tGOT")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Mode, r.Policy, r.Expected, okWord(r.Match), Cell(r))
	}
	for _, j := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.Name(), "journal", j.Report.Policy, "clean", okWord(j.Clean()), j.got())
	}
	tw.Flush()
}

// Summary is the outcome of a `replay run` in numbers, and in one line.
type Summary struct {
	Cells      int `json:"cells"`
	AsExpected int `json:"asExpected"`
	// Mismatched names the cells whose outcome was not the expected one
	// ("scenario mode policy").
	Mismatched []string `json:"mismatched,omitempty"`
	// DefaultCells counts the cells of vpccni's own flow; DefaultNotClean
	// names those that found something ("scenario mode (KINDS)").
	DefaultCells    int      `json:"defaultCells"`
	DefaultNotClean []string `json:"defaultNotClean,omitempty"`
	// DefaultKnownLimits names the default cells of known-limit scenarios
	// that found what they expect, counted apart from DefaultNotClean.
	DefaultKnownLimits []string `json:"defaultKnownLimits,omitempty"`
	Journals           int      `json:"journals"`
	JournalsClean      int      `json:"journalsClean"`
	// JournalsNotClean names the journals that did not replay clean
	// ("name VERDICT").
	JournalsNotClean []string `json:"journalsNotClean,omitempty"`
}

// Summarize counts the runs and journals.
func Summarize(rs []*engine.Result, js []JournalRun) Summary {
	var s Summary
	for _, r := range rs {
		s.Cells++
		if r.Match {
			s.AsExpected++
		} else {
			s.Mismatched = append(s.Mismatched, r.Scenario+" "+r.Mode+" "+r.Policy)
		}
		if r.Policy == (policy.Default{}).Name() {
			s.DefaultCells++
			if len(r.Violations) > 0 && r.KnownLimit != "" && r.Match {
				s.DefaultKnownLimits = append(s.DefaultKnownLimits, r.Scenario+" "+r.Mode)
			} else if len(r.Violations) > 0 {
				s.DefaultNotClean = append(s.DefaultNotClean, fmt.Sprintf("%s %s (%s)", r.Scenario, r.Mode, strings.Join(r.Kinds, "+")))
			}
		}
	}
	for _, j := range js {
		s.Journals++
		if j.Clean() {
			s.JournalsClean++
		} else {
			s.JournalsNotClean = append(s.JournalsNotClean, j.Name()+" "+j.Report.Verdict())
		}
	}
	return s
}

// OK reports whether every cell came out as expected and every journal
// replayed clean.
func (s Summary) OK() bool { return s.AsExpected == s.Cells && s.JournalsClean == s.Journals }

// String is the total line, e.g. "129/129 cells as expected; vpccni
// (default) clean everywhere; 1/1 journal replayed clean".
func (s Summary) String() string {
	parts := []string{fmt.Sprintf("%d/%d cells as expected", s.AsExpected, s.Cells)}
	if len(s.Mismatched) > 0 {
		parts[0] += ", MISMATCH in " + few(s.Mismatched)
	}
	switch {
	case s.DefaultCells == 0:
		parts = append(parts, "vpccni (default) not run")
	case len(s.DefaultNotClean) == 0 && len(s.DefaultKnownLimits) == 0:
		parts = append(parts, "vpccni (default) clean everywhere")
	case len(s.DefaultNotClean) == 0:
		parts = append(parts, fmt.Sprintf("vpccni (default) clean everywhere but %d known-limit %s (%s)",
			len(s.DefaultKnownLimits), plural(len(s.DefaultKnownLimits), "cell", "cells"), few(s.DefaultKnownLimits)))
	default:
		parts = append(parts, fmt.Sprintf("vpccni (default) NOT clean in %d of %d cells: %s", len(s.DefaultNotClean), s.DefaultCells, few(s.DefaultNotClean)))
	}
	if s.Journals > 0 {
		j := fmt.Sprintf("%d/%d %s replayed clean", s.JournalsClean, s.Journals, plural(s.Journals, "journal", "journals"))
		if len(s.JournalsNotClean) > 0 {
			j += " (not: " + few(s.JournalsNotClean) + ")"
		}
		parts = append(parts, j)
	}
	return strings.Join(parts, "; ")
}

// few lists the first three names, and how many more there are.
func few(names []string) string {
	if len(names) > 3 {
		return fmt.Sprintf("%s, +%d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Total writes the table's total line.
func Total(w io.Writer, s Summary) {
	fmt.Fprintln(w, s)
}

// JSON writes the runs, the journals and the summary as a JSON document.
func JSON(w io.Writer, rs []*engine.Result, js []JournalRun) error {
	type journalRun struct {
		File    string `json:"file"`
		Verdict string `json:"verdict"`
		*playback.Report
	}
	doc := struct {
		Runs     []*engine.Result `json:"runs"`
		Journals []journalRun     `json:"journals,omitempty"`
		Summary  Summary          `json:"summary"`
	}{Runs: rs, Summary: Summarize(rs, js)}
	for _, j := range js {
		doc.Journals = append(doc.Journals, journalRun{j.File, j.Report.Verdict(), j.Report})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
