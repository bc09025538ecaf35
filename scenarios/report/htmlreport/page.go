package htmlreport

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/report"
)

var (
	//go:embed page.html.tmpl
	pageHTML string
	//go:embed page.css
	pageCSS string
	//go:embed page.js
	pageJS string

	pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
		"css": func() template.CSS { return template.CSS(pageCSS) },
		"js":  func() template.JS { return template.JS(pageJS) },
		"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	}).Parse(pageHTML))
)

// Page is one report: lines of text at its head, an exploration's matrix,
// the summary table and the cells it links to.
type Page struct {
	Title    string
	Lines    []string
	Matrix   *Heatmap
	Examples []Example
	Rows     []SummaryRow
	Cells    []CellView
}

// SummaryRow is one line of the summary table; ID links to its cell.
type SummaryRow struct {
	ID, Scenario, Mode, Policy, Expected, Got string
	Match, Clean                              bool
}

// CellView is one cell as the template draws it.
type CellView struct {
	ID, Title, Scenario, Mode, Policy, Expected, Got string
	Source, KnownLimit                               string
	Match, Clean                                     bool
	Main                                             string
	Findings                                         []string
	Stray                                            []string
	SVG                                              svgView
	Steps                                            []column
}

// Example is an exploration's shrunk counterexample: its file and, when it
// was replayed for the page, its cell.
type Example struct {
	Verdict, Schedule, File, CellID string
}

// Heatmap is an exploration's outcomes by policy (rows) and mode
// (columns).
type Heatmap struct {
	Modes []string
	Rows  []HeatRow
}

// HeatRow is one policy's cells.
type HeatRow struct {
	Policy string
	Cells  []HeatCell
}

// HeatCell counts one policy × mode: how many schedules ran, how many
// found something, the kinds found; Level (0–4) is the share that failed,
// for its colour.
type HeatCell struct {
	Total, Failed int
	Kinds         string
	Level         int
	Example       string // the id of a counterexample's cell, if any
}

// AddRun adds a scenario run: a summary row and its cell.
func (p *Page) AddRun(r *engine.Result) {
	id := p.uniqueID(cellID(r.Scenario, r.Mode, r.Policy))
	p.add(fromResult(r, id), invariant.Main(r.Violations))
}

// AddJournal adds a replayed journal: a summary row and its cell.
func (p *Page) AddJournal(j report.JournalRun) {
	id := p.uniqueID(cellID(j.Name(), "journal", j.Report.Policy))
	p.add(fromJournal(j, id), invariant.Main(j.Report.Violations))
}

// AddExample adds a counterexample written to file, with its replay's
// cell when r is not nil.
func (p *Page) AddExample(verdict, schedule, file string, r *engine.Result) {
	e := Example{Verdict: verdict, Schedule: schedule, File: file}
	if r != nil {
		e.CellID = p.uniqueID(cellID("example", r.Scenario, r.Mode, r.Policy))
		p.add(fromResult(r, e.CellID), invariant.Main(r.Violations))
	}
	p.Examples = append(p.Examples, e)
}

// SetMatrix draws an exploration's matrix; a cell links to the first
// counterexample of its policy and mode among pols (added with
// AddExample, keyed "policy mode").
func (p *Page) SetMatrix(m explore.Matrix, examples map[string]string) {
	h := &Heatmap{}
	modes := map[string]bool{}
	var pols []string
	for pol, byMode := range m {
		pols = append(pols, pol)
		for md := range byMode {
			modes[md] = true
		}
	}
	for md := range modes {
		h.Modes = append(h.Modes, md)
	}
	sort.Strings(h.Modes)
	sort.Strings(pols)
	for _, pol := range pols {
		row := HeatRow{Policy: pol}
		for _, md := range h.Modes {
			c := m[pol][md]
			var hc HeatCell
			var kinds []string
			for _, k := range append([]string{"clean"}, invariant.Severity...) {
				hc.Total += c[k]
				if k != "clean" && c[k] > 0 {
					hc.Failed += c[k]
					kinds = append(kinds, fmt.Sprintf("%s %d", k, c[k]))
				}
			}
			hc.Kinds = strings.Join(kinds, ", ")
			if hc.Failed > 0 {
				hc.Level = 1 + min(3, hc.Failed*4/max(hc.Total, 1))
			}
			hc.Example = examples[pol+" "+md]
			row.Cells = append(row.Cells, hc)
		}
		h.Rows = append(h.Rows, row)
	}
	p.Matrix = h
}

func (p *Page) add(c cellInput, main string) {
	d := layout(c)
	v := CellView{ID: c.ID, Title: c.Title, Scenario: c.Scenario, Mode: c.Mode, Policy: c.Policy, Expected: c.Expected, Got: c.Got,
		Source: c.Source, KnownLimit: c.KnownLimit, Match: c.Match, Clean: len(c.Findings) == 0, Main: main, SVG: render(d), Steps: d.Columns}
	for _, f := range c.Findings {
		v.Findings = append(v.Findings, f.String())
	}
	for _, b := range d.Stray {
		v.Stray = append(v.Stray, b.Line+" — "+b.Finding)
	}
	v.Stray = append(v.Stray, d.Loose...)
	p.Cells = append(p.Cells, v)
	p.Rows = append(p.Rows, SummaryRow{ID: c.ID, Scenario: c.Scenario, Mode: c.Mode, Policy: c.Policy, Expected: c.Expected,
		Got: c.Got, Match: c.Match, Clean: v.Clean})
}

// uniqueID keeps ids unique when one cell is added twice.
func (p *Page) uniqueID(id string) string {
	taken := func(s string) bool {
		for _, c := range p.Cells {
			if c.ID == s {
				return true
			}
		}
		return false
	}
	out := id
	for i := 2; taken(out); i++ {
		out = fmt.Sprintf("%s-%d", id, i)
	}
	return out
}

// Write renders the page.
func (p *Page) Write(w io.Writer) error { return pageTemplate.Execute(w, p) }

func itoa(n int) string { return strconv.Itoa(n) }
