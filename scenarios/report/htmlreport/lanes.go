package htmlreport

import (
	"net/netip"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/scenarios/invariant"
)

// markFindings colours the leaked objects and marks the misroutes with
// their findings. It is a variable only so that the browser test can
// turn it off and see its checks fail: a page that draws no leak must not
// pass for one that shows the incident.
var markFindings = true

// drawing is a cell laid out for the page: columns are the timeline's
// steps, lanes the pods.
type drawing struct {
	Columns []column
	Band    []bandSegment // ipamd's state; empty when not known
	Lanes   []lane
	// Stray are leaked objects no pod's ADD made (or none that the
	// timeline shows), and misroutes whose sender has no lane.
	Stray []bar
	Loose []string
}

type column struct {
	Index        int
	Label, Event string
	Notes        []string
}

type bandSegment struct {
	From, To int
	Up       bool
	Text     string
}

// lane is one pod: a row per kind of kernel object it had, its ADDs and
// DEL attempts, and the misroutes it suffered.
type lane struct {
	Pod       string
	Rows      []row
	Marks     []laneMark
	Misroutes []string
	Leaks     int
}

type row struct {
	Class string
	Bars  []bar
}

// bar is one kernel object's life: from the step that made it to the one
// that removed it (To == len(Columns) when it outlived the run).
type bar struct {
	From, To int
	Line     string
	Outlived bool
	Leaked   bool
	Finding  string
}

type laneMark struct {
	Column int
	Add    bool
	OK     bool
	Text   string
}

// rowOrder is the order of a lane's rows; other kinds follow, by name.
var rowOrder = []string{"veth", "route", "rule 512", "rule 1536", "vlan", "iif rule"}

// layout derives the drawing from a cell's steps, ADDs, DELs and findings.
func layout(c cellInput) drawing {
	var d drawing
	for i, s := range c.Steps {
		d.Columns = append(d.Columns, column{Index: i, Label: s.Label, Event: s.Event, Notes: s.Notes})
	}
	d.Band = band(c.Ipamd, len(c.Steps))
	lanes := map[string]*lane{}
	var order []string
	laneOf := func(pod string) *lane {
		if l, ok := lanes[pod]; ok {
			return l
		}
		l := &lane{Pod: pod}
		lanes[pod] = l
		order = append(order, pod)
		return l
	}
	for _, p := range c.Pods {
		l := laneOf(p.Pod)
		l.Marks = append(l.Marks, laneMark{Column: p.Step, Add: true, OK: p.OK, Text: "ADD " + p.Pod + ": " + p.Text})
	}
	for _, del := range c.Dels {
		l := laneOf(del.Pod)
		l.Marks = append(l.Marks, laneMark{Column: del.Step, OK: del.OK, Text: "DEL " + del.Pod + ": " + del.Text})
	}
	leaks := findingsOf(c.Findings, invariant.Leak)
	for _, b := range lives(c.Steps) {
		if b.Outlived && markFindings {
			for _, f := range leaks {
				if leakNames(f.What, b.Line) {
					b.Leaked, b.Finding = true, f.String()
					break
				}
			}
		}
		owner, ok := ownerOf(c.Pods, b)
		if !ok {
			if b.Leaked {
				d.Stray = append(d.Stray, b)
			}
			continue
		}
		l := laneOf(owner)
		if b.Leaked {
			l.Leaks++
		}
		l.add(objectClass(b.Line), b)
	}
	if markFindings {
		for _, f := range findingsOf(c.Findings, invariant.Misroute) {
			if l, ok := lanes[sender(f.What)]; ok {
				l.Misroutes = append(l.Misroutes, f.String())
			} else {
				d.Loose = append(d.Loose, f.String())
			}
		}
	}
	for _, p := range order {
		l := lanes[p]
		sort.SliceStable(l.Rows, func(i, j int) bool { return rank(l.Rows[i].Class) < rank(l.Rows[j].Class) })
		d.Lanes = append(d.Lanes, *l)
	}
	return d
}

func (l *lane) add(class string, b bar) {
	for i := range l.Rows {
		if l.Rows[i].Class == class {
			l.Rows[i].Bars = append(l.Rows[i].Bars, b)
			return
		}
	}
	l.Rows = append(l.Rows, row{Class: class, Bars: []bar{b}})
}

func rank(class string) int {
	for i, c := range rowOrder {
		if c == class {
			return i
		}
	}
	return len(rowOrder)
}

// lives follows every kernel line through the steps' diffs: a line is
// born in the step that added it and dies in the one that removed it.
// Lines are counted: the same line twice is two objects.
func lives(steps []stepInput) []bar {
	open := map[string][]int{}
	var out []bar
	for i, s := range steps {
		for _, l := range s.Removed {
			if starts := open[l]; len(starts) > 0 {
				out = append(out, bar{From: starts[len(starts)-1], To: i, Line: l})
				open[l] = starts[:len(starts)-1]
			}
		}
		for _, l := range s.Added {
			open[l] = append(open[l], i)
		}
	}
	var lines []string
	for l := range open {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	for _, l := range lines {
		for _, from := range open[l] {
			out = append(out, bar{From: from, To: len(steps), Line: l, Outlived: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].From < out[j].From })
	return out
}

// ownerOf is the pod whose sandbox the object is of: the latest ADD, at
// or before the object appeared, whose address, host veth or VLAN link
// the object's line names. A line naming none of them is the node's.
func ownerOf(pods []podStart, b bar) (string, bool) {
	toks := tokens(b.Line)
	best := -1
	for i, p := range pods {
		if !p.OK || p.Step > b.From {
			continue
		}
		if toks[p.IP] || toks[p.HostVeth] || toks[p.VlanLink] {
			if best < 0 || p.Step >= pods[best].Step {
				best = i
			}
		}
	}
	if best < 0 {
		return "", false
	}
	return pods[best].Pod, true
}

// objectClass is the row a kernel line is drawn in.
func objectClass(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return line
	}
	switch f[0] {
	case "link":
		if len(f) > 2 && (f[2] == "veth" || f[2] == "vlan") {
			return f[2]
		}
		return "link"
	case "rule":
		if strings.Contains(line, " iif ") {
			return "iif rule"
		}
		return "rule " + strings.TrimSuffix(f[1], ":")
	}
	return f[0]
}

// tokens are a line's words, a host prefix (/32, /128) as its bare
// address (the kernel's lines and the findings write them differently)
// and a trailing colon dropped from a word that is not an IPv6 address.
func tokens(line string) map[string]bool {
	out := map[string]bool{}
	for _, t := range strings.Fields(line) {
		if s, ok := strings.CutSuffix(t, ":"); ok && !strings.Contains(s, ":") {
			t = s
		}
		if p, err := netip.ParsePrefix(t); err == nil && p.IsSingleIP() {
			t = p.Addr().String()
		}
		out[t] = true
	}
	delete(out, "")
	return out
}

// leakNames says whether a LEAK finding ("rule 512 to 10.0.2.11/32
// lookup main (default/web-1, deleted)", "link eni… (veth)", "route
// 10.0.2.11/32 dev eni… (…)") is about this kernel line: both start with
// the same word (rule, link, route) and every word of the finding before
// its parenthesis is one of the line's.
func leakNames(what, line string) bool {
	if i := strings.Index(what, " ("); i >= 0 {
		what = what[:i]
	}
	fw, lw := strings.Fields(what), strings.Fields(line)
	if len(fw) == 0 || len(lw) == 0 || fw[0] != lw[0] {
		return false
	}
	lt := tokens(line)
	ft := tokens(what)
	if len(ft) == 0 {
		return false
	}
	for t := range ft {
		if !lt[t] {
			return false
		}
	}
	return true
}

// sender is the pod a MISROUTE finding names first ("traffic from
// default/web-2 (…) to …").
func sender(what string) string {
	s, ok := strings.CutPrefix(what, "traffic from ")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(s, " ("); i >= 0 {
		s = s[:i]
	}
	return s
}

func findingsOf(vs []invariant.Violation, kind string) []invariant.Violation {
	var out []invariant.Violation
	for _, v := range vs {
		if v.Kind == kind {
			out = append(out, v)
		}
	}
	return out
}

// band is ipamd's state column by column: down before it first comes up.
func band(changes []ipamdChange, n int) []bandSegment {
	if len(changes) == 0 {
		return nil
	}
	var out []bandSegment
	cur := bandSegment{From: 0, Up: false, Text: "ipamd not started"}
	for _, c := range changes {
		if c.Step > cur.From {
			cur.To = c.Step
			out = append(out, cur)
		}
		text := "ipamd down: " + c.Text
		if c.Up {
			text = "ipamd up, checkpoint " + c.Memory + ": " + c.Text
		}
		if c.Step == cur.From && c.Step > 0 {
			// Several changes in one step: the last one stands, saying
			// what came before it.
			text = cur.Text + "; then " + text
		}
		cur = bandSegment{From: c.Step, Up: c.Up, Text: text}
	}
	cur.To = n
	out = append(out, cur)
	return out
}
