package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// report is what one run prints (--json: as it is).
type report struct {
	Sources  []sourceNote        `json:"sources"`
	Findings []audit.Finding     `json:"findings"`
	Counts   map[audit.Class]int `json:"counts"`
	Fix      *fixReport          `json:"fix,omitempty"`
}

// fixReport is what --fix planned and did.
type fixReport struct {
	DryRun  bool            `json:"dryRun"`
	Planned []audit.Finding `json:"planned"`
	Removed []audit.Removed `json:"removed,omitempty"`
	// After are the findings of an audit made after the removals.
	After []audit.Finding `json:"after,omitempty"`
	Error string          `json:"error,omitempty"`
}

func runAudit(o *options, stdout, stderr io.Writer, d deps) (int, error) {
	if err := check(o); err != nil {
		return exitCannot, err
	}
	k, err := d.opener.Open(o.netns)
	if err != nil {
		return exitCannot, cannot{fmt.Errorf("open the node's network namespace: %w", err)}
	}
	defer k.Close()
	once := func() ([]audit.Finding, []sourceNote, error) {
		in, notes, err := gather(o, k)
		if err != nil {
			return nil, nil, cannot{err}
		}
		fs, err := audit.Run(in)
		if err != nil {
			return nil, nil, cannot{fmt.Errorf("read the node: %w", err)}
		}
		return fs, notes, nil
	}
	fs, notes, err := once()
	if err != nil {
		return exitCannot, err
	}
	rep := report{Sources: notes, Findings: fs, Counts: audit.Counts(fs)}
	final := fs
	if o.fix {
		rep.Fix, final, err = fix(o, k, d, fs, once)
		if err != nil {
			return exitCannot, err
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitCannot, cannot{err}
		}
	} else {
		printHuman(stdout, rep)
	}
	if len(final) > 0 {
		return exitFindings, nil
	}
	return exitClean, nil
}

// fix plans from two audits --settle apart and, without --dry-run, removes
// and audits again; the findings it returns decide the exit status.
func fix(o *options, k kernel.API, d deps, first []audit.Finding, once func() ([]audit.Finding, []sourceNote, error)) (*fixReport, []audit.Finding, error) {
	d.sleep(o.settle)
	second, _, err := once()
	if err != nil {
		return nil, nil, err
	}
	fr := &fixReport{DryRun: o.dryRun, Planned: audit.Stable(first, second)}
	if o.dryRun {
		return fr, second, nil
	}
	removed, ferr := audit.Fix(k, fr.Planned)
	fr.Removed = removed
	if ferr != nil {
		fr.Error = ferr.Error()
	}
	after, _, err := once()
	if err != nil {
		return nil, nil, err
	}
	fr.After = after
	return fr, after, nil
}

func check(o *options) error {
	for _, p := range o.vethPrefixes {
		if err := ownership.ValidatePrefix(p); err != nil {
			return fmt.Errorf("--veth-prefix %q: %w", p, err)
		}
	}
	if o.settle < 0 {
		return fmt.Errorf("--settle %s: must not be negative", o.settle)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be positive", o.timeout)
	}
	if !o.fix && !o.dryRun {
		return fmt.Errorf("--dry-run=false without --fix: nothing would be removed; add --fix")
	}
	return nil
}

func printHuman(w io.Writer, rep report) {
	for _, n := range rep.Sources {
		where := n.Where
		if where == "" {
			where = "-"
		}
		fmt.Fprintf(w, "%-10s %s: %s\n", n.Source, where, n.Note)
	}
	fmt.Fprintln(w)
	printFindings(w, rep.Findings)
	fmt.Fprintln(w, summary(rep.Findings))
	if rep.Fix == nil {
		if n := fixable(rep.Findings); n > 0 {
			fmt.Fprintf(w, "%d of them --fix may remove (--fix shows the plan, --fix --dry-run=false carries it out).\n", n)
		}
		return
	}
	fr := rep.Fix
	fmt.Fprintln(w)
	switch {
	case len(fr.Planned) == 0:
		fmt.Fprintln(w, "--fix: nothing to remove (only LEAKED objects proven a pod's, seen by both audits, are).")
	case fr.DryRun:
		fmt.Fprintf(w, "--fix (dry run): would remove %d:\n", len(fr.Planned))
		for _, f := range fr.Planned {
			fmt.Fprintf(w, "  %s\n", f.Object)
		}
		fmt.Fprintln(w, "Run again with --fix --dry-run=false to remove them.")
	default:
		for _, r := range fr.Removed {
			switch {
			case r.Done:
				fmt.Fprintf(w, "removed  %s\n", r.Finding.Object)
			default:
				fmt.Fprintf(w, "left     %s: %s\n", r.Finding.Object, r.Error)
			}
		}
		fmt.Fprintf(w, "after --fix: %s\n", summary(fr.After))
		printFindings(w, fr.After)
	}
}

func printFindings(w io.Writer, fs []audit.Finding) {
	if len(fs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tADDRESS\tOBJECT\tWHY\tSHOW")
	for _, f := range fs {
		addr := f.Addr
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Class, addr, f.Object, f.Reason, f.Show)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func summary(fs []audit.Finding) string {
	if len(fs) == 0 {
		return "clean: no finding."
	}
	counts := audit.Counts(fs)
	var parts []string
	for c, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, c))
	}
	sort.Strings(parts)
	noun := "findings"
	if len(fs) == 1 {
		noun = "finding"
	}
	return fmt.Sprintf("%d %s: %s.", len(fs), noun, strings.Join(parts, ", "))
}

func fixable(fs []audit.Finding) int {
	n := 0
	for _, f := range fs {
		if f.Fixable {
			n++
		}
	}
	return n
}
