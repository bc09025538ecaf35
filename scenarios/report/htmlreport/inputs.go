package htmlreport

import (
	"net/netip"
	"strings"

	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/report"
)

// fromResult is a scenario run as the page draws it.
func fromResult(r *engine.Result, id string) cellInput {
	c := cellInput{ID: id, Title: r.Scenario, Scenario: r.Scenario, Mode: r.Mode, Policy: r.Policy, Expected: r.Expected,
		Got: report.Cell(r), Match: r.Match, Findings: r.Violations, KnownLimit: r.KnownLimit, Source: r.File}
	if r.Incident != "" {
		c.Title += " (" + r.Incident + ")"
	}
	for _, s := range r.Steps {
		c.Steps = append(c.Steps, stepInput{At: s.At, Label: atLabel(s.At), Event: s.Event, Notes: s.Notes, Added: s.Added, Removed: s.Removed})
	}
	c.Ipamd = []ipamdChange{}
	for _, m := range r.Marks {
		switch m.Kind {
		case engine.MarkAdd:
			p := podStart{Pod: m.Pod, Step: m.Step, IP: m.IP, HostVeth: m.HostVeth, OK: m.OK, Text: m.Text}
			if m.OK {
				p.Text = m.IP + " on " + m.HostVeth
			}
			if m.Vlan != 0 {
				p.VlanLink = ownership.VlanLink(m.Vlan)
				p.Text += ", VLAN " + p.VlanLink
			}
			c.Pods = append(c.Pods, p)
		case engine.MarkDel:
			c.Dels = append(c.Dels, delAttempt{Pod: m.Pod, Step: m.Step, Answer: m.Ipamd, Text: m.Text, OK: m.OK})
		case engine.MarkIpamd:
			c.Ipamd = append(c.Ipamd, ipamdChange{Step: m.Step, Up: m.Ipamd == "up", Memory: m.Memory, Text: m.Text})
		}
	}
	return c
}

// fromJournal is a replayed journal as the page draws it: a column per
// invocation, the node namespace's objects (the pods' own namespaces are
// gone with their sandboxes), ipamd's state unknown.
func fromJournal(j report.JournalRun, id string) cellInput {
	r := j.Report
	c := cellInput{ID: id, Title: j.Name() + " (journal)", Scenario: j.Name(), Mode: "journal", Policy: r.Policy, Expected: "clean",
		Got: r.Verdict(), Match: j.Clean(), Findings: r.Violations, Source: j.File}
	for i, s := range r.Steps {
		st := stepInput{Label: "#" + itoa(s.N) + " " + s.Verb, Event: s.Verb + " " + s.Pod + " " + s.Container + ": " + s.Replayed,
			Notes: append(append([]string{}, s.Ipamd...), s.Notes...)}
		st.Added = nodeLines(s.Added)
		st.Removed = nodeLines(s.Removed)
		c.Steps = append(c.Steps, st)
		ok := strings.HasPrefix(s.Replayed, "ok")
		switch s.Verb {
		case "ADD":
			p := podStart{Pod: s.Pod, Step: i, OK: ok, Text: s.Replayed}
			if ok {
				p.IP = firstAddr(strings.TrimPrefix(s.Replayed, "ok"))
				for _, l := range st.Added {
					if f := strings.Fields(l); len(f) > 2 && f[0] == "link" && f[2] == "veth" {
						p.HostVeth = f[1]
					}
				}
			}
			c.Pods = append(c.Pods, p)
		case "DEL":
			c.Dels = append(c.Dels, delAttempt{Pod: s.Pod, Step: i, Answer: strings.Join(s.Ipamd, "; "), Text: s.Replayed, OK: ok})
		}
	}
	return c
}

// nodeLines keeps the node namespace's lines of a journal step's
// "<namespace>: <line>" changes, without the prefix.
func nodeLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, playback.NodeNS+": "); ok {
			out = append(out, rest)
		}
	}
	return out
}

// firstAddr is the first address of "10.0.1.5/32 2001:db8::5/128" (or
// of bare addresses), "" when there is none.
func firstAddr(s string) string {
	for _, f := range strings.Fields(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			return p.Addr().String()
		}
		if a, err := netip.ParseAddr(f); err == nil {
			return a.String()
		}
	}
	return ""
}
