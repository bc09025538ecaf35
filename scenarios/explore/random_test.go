package explore

import (
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// TestGenerateIsASeedsFunction: a seed, index and mode name one timeline
// for good; another index gives another.
func TestGenerateIsASeedsFunction(t *testing.T) {
	a, _ := yaml.Marshal(Generate(7, 3, "ipv4"))
	b, _ := yaml.Marshal(Generate(7, 3, "ipv4"))
	c, _ := yaml.Marshal(Generate(7, 4, "ipv4"))
	if string(a) != string(b) {
		t.Fatalf("the same seed and index gave two timelines:\n%s\n%s", a, b)
	}
	if string(a) == string(c) {
		t.Fatal("two indexes gave the same timeline")
	}
}

// TestGeneratedTimelines: every generated timeline is a valid scenario
// that leaves ipamd running, and together they draw every move.
func TestGeneratedTimelines(t *testing.T) {
	seen := map[string]bool{}
	for i := range 400 {
		mode := spec.KnownModes[i%len(spec.KnownModes)]
		f, err := generated(11, i, mode, "default")
		if err != nil {
			t.Fatal(err)
		}
		if !withinLimits(f) {
			t.Fatalf("schedule %d leaves ipamd down:\n%+v", i, f.Timeline)
		}
		for _, ev := range f.Timeline {
			seen[kindOf(ev)] = true
		}
	}
	for _, want := range []string{"add", "delete", "force-delete", "late-del", "forget", "gc", "evict", "cancel-eviction",
		"restart", "failpoint", "wait", "reuse", "settle", "forged-prevresult", "no-prevresult", "bad-config"} {
		if !seen[want] {
			t.Errorf("400 schedules never drew %s", want)
		}
	}
}

func kindOf(ev spec.Event) string {
	switch {
	case ev.BadConfig:
		return "bad-config"
	case ev.ForgePrevResult != nil:
		return "forged-prevresult"
	case ev.WithoutPrevResult:
		return "no-prevresult"
	case len(ev.Add) > 0 && ev.Add[0].Node != "":
		return "reuse"
	case len(ev.Add) > 0:
		return "add"
	case len(ev.Delete) > 0:
		return "delete"
	case len(ev.ForceDelete) > 0:
		return "force-delete"
	case len(ev.LateDel) > 0:
		return "late-del"
	case len(ev.RuntimeForgets) > 0:
		return "forget"
	case ev.GC != nil:
		return "gc"
	case ev.Evict != "":
		return "evict"
	case ev.CancelEviction != "":
		return "cancel-eviction"
	case ev.Restart != "":
		return "restart"
	case ev.Failpoint != nil:
		return "failpoint"
	case ev.Wait != nil:
		return "wait"
	case ev.Settle != nil:
		return "settle"
	}
	return "?"
}

// TestWithinLimits: what shrinking may not produce. An eviction or a
// refused start must be followed by a start that succeeds; a lost sandbox
// must be collected before ipamd loses its checkpoint, and not be lost
// after.
func TestWithinLimits(t *testing.T) {
	lost := spec.Event{RuntimeForgets: []string{"default/p0"}}
	for _, c := range []struct {
		tl   []spec.Event
		want bool
	}{
		{nil, true},
		{[]spec.Event{{Evict: "aws-node"}}, false},
		{[]spec.Event{{Evict: "aws-node"}, {CancelEviction: "aws-node"}}, true},
		{[]spec.Event{{Evict: "aws-node"}, {CancelEviction: "aws-node", BadConfig: true}}, false},
		{[]spec.Event{{Restart: "ipamd", BadConfig: true}, {Restart: "ipamd"}}, true},
		{[]spec.Event{lost, {Restart: "ipamd", Memory: "kept"}}, true},
		{[]spec.Event{lost, {Restart: "ipamd", Memory: "lost"}}, false},
		{[]spec.Event{lost, {Failpoint: &spec.Failpoint{Memory: "corrupt"}}}, false},
		{[]spec.Event{lost, {GC: &struct{}{}}, {Restart: "ipamd", Memory: "lost"}}, true},
		{[]spec.Event{{Evict: "aws-node"}, lost, {GC: &struct{}{}}, {CancelEviction: "aws-node", Memory: "lost"}}, false},
		{[]spec.Event{{Restart: "ipamd", Memory: "lost"}, lost}, false},
	} {
		if got := withinLimits(&spec.Scenario{Timeline: c.tl}); got != c.want {
			t.Errorf("%+v: %v, want %v", c.tl, got, c.want)
		}
	}
}

// TestRandomFindsAndShrinks: the reference's flow of v1.10 leaks on
// generated timelines (the eviction of #2048 among them); the first
// failure shrinks to a file that replays to the same verdict, and
// vpccni's flow is clean on the same schedules.
func TestRandomFindsAndShrinks(t *testing.T) {
	opt := RandomOptions{Seed: 3, Schedules: 40, Modes: []string{"ipv4"}, Policies: []string{"ref-v1.10", "default"}}
	rep, err := RunRandom(opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Schedules != 40 || rep.PerSecond() <= 0 {
		t.Fatalf("%d schedules, %.0f/s", rep.Schedules, rep.PerSecond())
	}
	if c := rep.Matrix["default"]["ipv4"]; c["clean"] != 20 {
		t.Fatalf("vpccni's flow: %v", c)
	}
	if rep.Failed() {
		t.Fatal("Failed() says vpccni's flow failed")
	}
	ds := rep.Distinct()
	if len(ds) == 0 {
		t.Fatalf("ref-v1.10 clean on 20 generated timelines: %v", rep.Matrix)
	}
	s, err := ShrinkRandom(3, ds[0])
	if err != nil {
		t.Fatal(err)
	}
	path, err := Write(t.TempDir(), s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine.Run(back, ds[0].Mode, policy.RefV110, engine.Options{Quiet: true})
	if err != nil || !res.Match || res.Main != ds[0].Verdict {
		t.Fatalf("the shrunk file gives %v (%v), want %s", res, err, ds[0].Verdict)
	}
	if len(back.Timeline) >= len(ds[0].File.Timeline) && len(back.Pods) >= len(ds[0].File.Pods) {
		t.Errorf("nothing was shrunk: %d events, %d pods", len(back.Timeline), len(back.Pods))
	}
}

// TestRunRandomBounds: one bound is required, and a duration alone ends a
// run.
func TestRunRandomBounds(t *testing.T) {
	rep, err := RunRandom(RandomOptions{Seed: 1, Duration: 300 * time.Millisecond, Modes: []string{"ipv6"}})
	if err != nil || rep.Schedules == 0 {
		t.Fatalf("%v, %+v", err, rep)
	}
	if _, err := RunRandom(RandomOptions{Seed: 1}); err == nil {
		t.Fatal("no bound accepted")
	}
	if _, err := RunRandom(RandomOptions{Seed: 1, Schedules: 1, Policies: []string{"nope"}}); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

// TestDistinctAndFailed: one failure per policy, mode and verdict, the
// first; only vpccni's flow failing fails the run.
func TestDistinctAndFailed(t *testing.T) {
	rep := &RandomReport{Failures: []RandomOutcome{
		{Index: 1, Mode: "ipv4", Policy: "ref-v1.10", Verdict: "LEAK"},
		{Index: 2, Mode: "ipv4", Policy: "ref-v1.10", Verdict: "LEAK"},
		{Index: 3, Mode: "ipv6", Policy: "ref-v1.10", Verdict: "LEAK"},
		{Index: 4, Mode: "ipv4", Policy: "ref-v1.10", Verdict: "IPAM"},
	}}
	if d := rep.Distinct(); len(d) != 3 || d[0].Index != 1 || d[1].Index != 3 || d[2].Index != 4 {
		t.Fatalf("distinct: %+v", d)
	}
	if rep.Failed() {
		t.Fatal("a legacy flow's failures fail the run")
	}
	rep.Failures = append(rep.Failures, RandomOutcome{Index: 5, Mode: "ipv4", Policy: "default", Verdict: "LEAK"})
	if !rep.Failed() {
		t.Fatal("vpccni's failure does not fail the run")
	}
}
