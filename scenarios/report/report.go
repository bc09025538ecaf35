// Package report prints scenario runs: the timeline with the kernel diff of
// each step, the table scenario × mode × policy, and the same as JSON.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/vpccni/vpccni/scenarios/engine"
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
	var what []string
	for i, v := range r.Violations {
		if i == 3 {
			what = append(what, fmt.Sprintf("+%d more", len(r.Violations)-3))
			break
		}
		what = append(what, v.What)
	}
	return strings.Join(r.Kinds, "+") + " (" + strings.Join(what, "; ") + ")"
}

// Table writes one row per run.
func Table(w io.Writer, rs []*engine.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMODE\tPOLICY\tEXPECTED\tRESULT\tGOT")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Mode, r.Policy, r.Expected, okWord(r.Match), Cell(r))
	}
	tw.Flush()
}

// JSON writes the runs as a JSON document.
func JSON(w io.Writer, rs []*engine.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Runs []*engine.Result `json:"runs"`
	}{rs})
}
