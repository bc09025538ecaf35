package htmlreport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

func TestLivesCountsLinesAndKeepsWhatOutlivesTheRun(t *testing.T) {
	steps := []stepInput{
		{Added: []string{"rule 512: from all to 10.0.1.5 lookup main", "link a veth up"}},
		{Added: []string{"rule 512: from all to 10.0.1.5 lookup main"}}, // a duplicate: a second object
		{Removed: []string{"rule 512: from all to 10.0.1.5 lookup main", "link a veth up"}},
	}
	got := lives(steps)
	var closed, open int
	for _, b := range got {
		if b.Outlived {
			open++
			if b.To != 3 {
				t.Errorf("an object alive at the end ends at %d, want 3", b.To)
			}
		} else {
			closed++
		}
	}
	if closed != 2 || open != 1 {
		t.Errorf("lives: %d removed and %d alive, want 2 and 1: %+v", closed, open, got)
	}
}

func TestOwnerIsTheLatestADDThatNamesTheObject(t *testing.T) {
	pods := []podStart{
		{Pod: "web-0", Step: 1, IP: "10.0.1.5", HostVeth: "enia", OK: true},
		{Pod: "web-3", Step: 5, IP: "10.0.1.5", HostVeth: "enib", OK: true},
		{Pod: "web-9", Step: 2, IP: "10.0.9.9", OK: false}, // a failed ADD owns nothing
	}
	for _, c := range []struct {
		line string
		from int
		want string
	}{
		{"rule 512: from all to 10.0.1.5 lookup main", 1, "web-0"},
		{"rule 512: from all to 10.0.1.5 lookup main", 6, "web-3"},
		{"route table main: 10.0.1.5/32 dev enib scope link", 5, "web-3"},
		{"link enia veth up mtu 9001", 1, "web-0"},
		{"rule 512: from all to 10.0.9.9 lookup main", 3, ""},
		{"route table main: default via 10.0.1.1 dev eth0", 2, ""},
	} {
		got, _ := ownerOf(pods, bar{Line: c.line, From: c.from})
		if got != c.want {
			t.Errorf("owner of %q from step %d: %q, want %q", c.line, c.from, got, c.want)
		}
	}
}

func TestLeakNamesMatchesFindingsToKernelLines(t *testing.T) {
	for _, c := range []struct {
		what, line string
		want       bool
	}{
		{"rule 512 to 10.0.2.11/32 lookup main (default/web-1, deleted)", "rule 512: from all to 10.0.2.11 lookup main", true},
		{"rule 1536 from 10.0.2.11/32 lookup 2 (default/web-1, deleted)", "rule 1536: from 10.0.2.11 lookup 2", true},
		{"rule 512 to 2001:db8::5/128 lookup main (default/web-1, deleted)", "rule 512: inet6 from all to 2001:db8::5 lookup main", true},
		{"link eni0761ccbeace (veth)", "link eni0761ccbeace veth up mtu 9001", true},
		{"route 10.0.2.11/32 dev eni0761ccbeace (default/web-1, deleted)", "route table main: 10.0.2.11/32 dev eni0761ccbeace scope link", true},
		{"rule 512 to 10.0.2.11/32 lookup main (default/web-1, deleted)", "rule 512: from all to 10.0.2.12 lookup main", false},
		{"rule 1536 from 10.0.2.11/32 lookup 2 (x)", "rule 512: from all to 10.0.2.11 lookup main", false},
		{"link vlan.eth.1 (vlan)", "route table 101: 10.1.0.1/32 dev vlan.eth.1 scope link", false},
		{"link vlan.eth.1 (vlan)", "link vlan.eth.1 vlan up mtu 9001 vlan 1 parent eth2", true},
		{"iptables rule nat/AWS-SNAT-CHAIN-0 -d 10.0.0.0/16 -j RETURN", "rule 512: from all to 10.0.0.0/16 lookup main", false},
	} {
		if got := leakNames(c.what, c.line); got != c.want {
			t.Errorf("leakNames(%q, %q) = %v, want %v", c.what, c.line, got, c.want)
		}
	}
}

func TestBandFollowsIpamd(t *testing.T) {
	got := band([]ipamdChange{{Step: 0, Up: true, Memory: "kept"}, {Step: 2, Up: false, Text: "evicted"}, {Step: 5, Up: true, Memory: "lost"}}, 8)
	want := []bandSegment{{From: 0, To: 2, Up: true}, {From: 2, To: 5}, {From: 5, To: 8, Up: true}}
	if len(got) != len(want) {
		t.Fatalf("band %+v", got)
	}
	for i := range want {
		if got[i].From != want[i].From || got[i].To != want[i].To || got[i].Up != want[i].Up {
			t.Errorf("segment %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[2].Text, "checkpoint lost") {
		t.Errorf("the restart does not say its checkpoint was lost: %q", got[2].Text)
	}
}

// TestEveryLeakedObjectIsDrawnRed: in every mode and under every policy
// of two eviction scenarios and a branch-ENI one (VLAN links, iif rules), each LEAK finding about a kernel object
// (rule, link, route) is drawn as one red bar, and a clean cell has none.
func TestEveryLeakedObjectIsDrawnRed(t *testing.T) {
	for _, f := range []string{"../../library/autoscaler-evicts-aws-node.yaml", "../../library/aws-node-evicted-for-good.yaml", "../../library/sgp-recreated-same-name.yaml"} {
		s, err := spec.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range s.Modes {
			for _, pn := range s.Policies() {
				pol, err := policy.ByName(pn)
				if err != nil {
					t.Fatal(err)
				}
				r, err := engine.Run(s, mode, pol, engine.Options{})
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				for _, v := range r.Violations {
					if v.Kind == invariant.Leak && (strings.HasPrefix(v.What, "rule ") || strings.HasPrefix(v.What, "link ") || strings.HasPrefix(v.What, "route ")) {
						want++
					}
				}
				d := layout(fromResult(r, "x"))
				got := len(d.Stray)
				for _, l := range d.Lanes {
					got += l.Leaks
				}
				if got != want {
					t.Errorf("%s %s %s: %d leaked objects drawn, %d LEAK findings about kernel objects: %v", s.Name, mode, pn, got, want, r.Violations)
				}
			}
		}
	}
}

// TestPageMarksTheIncident renders #2048 under ref-v1.11: the page is
// self-contained, its leaked rules are red with their findings and the
// misroute is marked; with markFindings off, none of that.
func TestPageMarksTheIncident(t *testing.T) {
	s, err := spec.Load("../../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.Run(s, "ipv4", policy.RefV111, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	render := func() string {
		p := &Page{Title: "t"}
		p.AddRun(r)
		var b bytes.Buffer
		if err := p.Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	cells := func(html string) string { // past the legend, which shows every mark
		i := strings.Index(html, `<section class="cell`)
		if i < 0 {
			t.Fatalf("no cell in the page")
		}
		return html[i:]
	}
	html := render()
	if n := strings.Count(cells(html), `class="obj leaked"`); n != 2 {
		t.Errorf("%d leaked objects drawn, want 2 (rules 512 and 1536 of web-1)", n)
	}
	if !strings.Contains(cells(html), `class="misroute" d=`) || !strings.Contains(html, "MISROUTE: traffic from default/web-2") {
		t.Error("no misroute mark on web-2's lane")
	}
	for _, remote := range []string{`src="http`, `href="http`, `src="//`, `url(http`, `@import`} {
		if strings.Contains(html, remote) {
			t.Errorf("the page refers to %s: it must fetch nothing", remote)
		}
	}
	markFindings = false
	defer func() { markFindings = true }()
	if html := cells(render()); strings.Contains(html, `class="obj leaked"`) || strings.Contains(html, `class="misroute" d=`) {
		t.Error("markFindings off still marks findings")
	}
}
