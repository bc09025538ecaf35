package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/scenarios/playback"
)

// Journal writes a journal replay: each invocation with what was recorded
// and what the replay did (and, unless quiet, its kernel diff), then the
// pods, the IP accounting, what the pods left in the kernel, and the
// verdict.
func Journal(w io.Writer, file string, r *playback.Report, quiet bool) {
	fmt.Fprintf(w, "=== journal %s  %d invocations  policy=%s  (kernel model)\n", file, len(r.Steps), r.Policy)
	for _, s := range r.Steps {
		who := s.Pod
		if who == "" {
			who = short(s.Container)
		}
		fmt.Fprintf(w, "  #%-4d %s %-6s %s\n", s.N, s.Time.Format("15:04:05.000"), s.Verb, who)
		if s.Recorded == s.Replayed {
			fmt.Fprintf(w, "           = %s\n", s.Replayed)
		} else {
			fmt.Fprintf(w, "           recorded %s\n           replayed %s\n", s.Recorded, s.Replayed)
		}
		if len(s.Ipamd) > 0 {
			fmt.Fprintf(w, "           ipamd: %s\n", strings.Join(s.Ipamd, ", "))
		}
		for _, d := range s.Diverged {
			fmt.Fprintf(w, "           ! DIVERGED: %s\n", d)
		}
		if quiet {
			continue
		}
		changes(w, s.Notes, s.Added, s.Removed)
	}
	fmt.Fprintf(w, "  pods:\n")
	for _, p := range r.Pods {
		name := p.Name
		if name == "" {
			name = "(no pod name)"
		}
		fmt.Fprintf(w, "    %-30s %s/%s  %-8s %s\n", name, short(p.ContainerID), p.IfName, p.State, strings.Join(p.IPs, ","))
	}
	fmt.Fprintf(w, "  ipamd, from its recorded answers: %d assigned, %d released, %d forgotten (unknown pod), %d still held\n",
		r.IPs.Assigned, r.IPs.Released, r.IPs.Forgotten, len(r.IPs.Held))
	for _, h := range r.IPs.Held {
		note := ""
		if h.State != playback.StateLive {
			note = "  (not a live pod: ipamd's reconciler reclaims it, or a DEL still will)"
		}
		fmt.Fprintf(w, "    %s  %s, %s%s\n", h.IP, h.Pod, h.State, note)
	}
	fmt.Fprintf(w, "  left in the kernel by the journal's invocations:\n")
	if len(r.Left) == 0 {
		fmt.Fprintf(w, "    nothing\n")
	}
	for _, ns := range sortedKeys(r.Left) {
		for _, l := range r.Left[ns] {
			fmt.Fprintf(w, "    %s: %s\n", playback.Label(ns), l)
		}
	}
	for _, ns := range sortedKeys(r.Removed) {
		for _, l := range r.Removed[ns] {
			fmt.Fprintf(w, "    removed from %s: %s\n", playback.Label(ns), l)
		}
	}
	fmt.Fprintf(w, "  divergences from the recorded invocations: %d\n", r.Divergences)
	fmt.Fprintf(w, "  verdict: %s\n", r.Verdict())
	for _, v := range r.Violations {
		fmt.Fprintf(w, "    %s\n", v)
	}
	fmt.Fprintln(w)
}

// JournalJSON writes journal replays as one JSON document.
func JournalJSON(w io.Writer, files []string, rs []*playback.Report) error {
	type run struct {
		File    string `json:"file"`
		Verdict string `json:"verdict"`
		*playback.Report
	}
	out := struct {
		Journals []run `json:"journals"`
	}{}
	for i, r := range rs {
		out.Journals = append(out.Journals, run{files[i], r.Verdict(), r})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func short(id string) string {
	if len(id) > 16 { // a runtime's 64-hex ID
		return id[:12]
	}
	return id
}

func sortedKeys(m map[string][]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		// The node first, then the pod namespaces.
		if (ks[i] == playback.NodeNS) != (ks[j] == playback.NodeNS) {
			return ks[i] == playback.NodeNS
		}
		return ks[i] < ks[j]
	})
	return ks
}
