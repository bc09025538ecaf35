package engine

import "time"

// Kinds of Mark.
const (
	MarkAdd   = "add"   // a sandbox's ADD
	MarkDel   = "del"   // a DEL attempt (kubelet's, or the runtime's after a failed ADD)
	MarkIpamd = "ipamd" // ipamd came up or went down
)

// Mark is one moment of a run that a picture of it shows: a pod's ADD
// with the address, host veth and VLAN it got, a DEL attempt with ipamd's
// answer and what the DEL returned, ipamd going down or coming up with
// its checkpoint kept, lost or corrupt. The timeline's notes say the same
// in words; marks are what a renderer reads, so it never parses words.
// Runs with Options.Quiet record none.
type Mark struct {
	At time.Duration `json:"at"`
	// Step is the index in Result.Steps of the step it happened in.
	Step int    `json:"step"`
	Kind string `json:"kind"`
	Pod  string `json:"pod,omitempty"`
	// IP, HostVeth and Vlan are what an ADD gave the pod's sandbox.
	IP       string `json:"ip,omitempty"`
	HostVeth string `json:"hostVeth,omitempty"`
	Vlan     int    `json:"vlan,omitempty"`
	// Ipamd is ipamd's answer to a DEL ("released 10.0.1.5", "unknown
	// pod", "unreachable", …; "not asked" when the DEL did not call it),
	// or ipamd's new state: "up" or "down".
	Ipamd string `json:"ipamd,omitempty"`
	// Memory is what a starting ipamd found of its checkpoint: kept, lost
	// or corrupt.
	Memory string `json:"memory,omitempty"`
	// Text is the whole outcome in the timeline's words.
	Text string `json:"text,omitempty"`
	// OK says the ADD or DEL succeeded.
	OK bool `json:"ok,omitempty"`
}

// mark records m at the current time (not in quiet runs: nobody draws
// them).
func (r *run) mark(m Mark) {
	if r.opt.Quiet {
		return
	}
	m.At, m.Step = r.now, len(r.steps)-1
	r.marks = append(r.marks, m)
}

// markDel records the DEL attempt just run on pod name.
func (r *run) markDel(name string, err error) {
	if r.opt.Quiet {
		return
	}
	answer := "not asked"
	if t := r.exec.last; t != nil && t.answer != "" {
		answer = t.answer
	} else if t == nil && err != nil {
		answer = "plugin did not run"
	}
	r.mark(Mark{Kind: MarkDel, Pod: name, Ipamd: answer, Text: r.delOutcome(err), OK: err == nil})
}

// markIpamdDown records ipamd going down, with why.
func (r *run) markIpamdDown(why string) {
	r.mark(Mark{Kind: MarkIpamd, Ipamd: "down", Text: why})
}
