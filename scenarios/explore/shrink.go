package explore

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/scenarios/spec"
)

// Shrink reduces a failing schedule to the fewest timeline events and pods
// that still fail with the same verdict, and returns it as a scenario file
// whose failpoint event carries the schedule and whose expectation is that
// verdict for the schedule's policy and mode: `replay run` reproduces it.
// Events are dropped one at a time, first to last, until no single drop
// keeps the failure (greedy one-minimality); then pods no event names.
func Shrink(t *spec.Scenario, o Outcome) (*spec.Scenario, error) {
	want := o.Verdict
	f := schedFile(t, &o.Schedule, o.Policy)
	f.Modes = []string{o.Mode}
	fails := func(c *spec.Scenario) (bool, error) {
		res, err := run(c, o.Mode, o.Policy)
		if err != nil {
			return false, nil // a timeline cut where it cannot run: not a reproduction
		}
		return outcomeOf(o.Schedule, res).Verdict == want, nil
	}
	f, err := minimize(f, 1, func(c *spec.Scenario) bool { ok, _ := fails(c); return ok })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Schedule, err)
	}
	f.Name = fileName(t.Name, o)
	f.Incident = t.Incident
	f.Description = fmt.Sprintf("Found by replay explore on %s: %s gives %s. Shrunk to the events that still show it.",
		t.Name, o.Schedule, strings.ToLower(want))
	f.Expect = map[string]spec.Verdicts{o.Policy: {All: strings.ToLower(want)}}
	if ok, _ := fails(f); !ok {
		return nil, fmt.Errorf("%s: the shrunk file does not reproduce", o.Schedule)
	}
	return f, nil
}

// minimize drops events and pods from f, one at a time, first to last,
// while fails still holds, until no single drop keeps it (greedy
// one-minimality); events before keep (an armed failpoint) are never
// dropped. Then it keeps only the pods some event names.
func minimize(f *spec.Scenario, keep int, fails func(*spec.Scenario) bool) (*spec.Scenario, error) {
	if !fails(f) {
		return nil, fmt.Errorf("does not reproduce before shrinking")
	}
	for changed := true; changed; {
		changed = false
		for _, c := range candidates(f, keep) {
			if fails(c) {
				f, changed = c, true
				break
			}
		}
	}
	c := *f
	c.Pods = usedPods(f)
	if !fails(&c) {
		return f, nil
	}
	return &c, nil
}

// candidates are f with one thing less: an event (never one before keep),
// or one pod out of an event that names several.
func candidates(f *spec.Scenario, keep int) []*spec.Scenario {
	var out []*spec.Scenario
	with := func(tl []spec.Event) *spec.Scenario {
		c := *f
		c.Timeline = tl
		return &c
	}
	for i := keep; i < len(f.Timeline); i++ {
		out = append(out, with(slices.Delete(slices.Clone(f.Timeline), i, i+1)))
	}
	for i := keep; i < len(f.Timeline); i++ {
		ev := f.Timeline[i]
		for j := range ev.Add {
			if len(ev.Add) > 1 {
				tl := slices.Clone(f.Timeline)
				tl[i].Add = slices.Delete(slices.Clone(ev.Add), j, j+1)
				out = append(out, with(tl))
			}
		}
		for _, list := range []func(*spec.Event) *[]string{
			func(e *spec.Event) *[]string { return &e.Delete }, func(e *spec.Event) *[]string { return &e.ForceDelete },
			func(e *spec.Event) *[]string { return &e.LateDel }, func(e *spec.Event) *[]string { return &e.RuntimeForgets }} {
			names := *list(&ev)
			for j := range names {
				if len(names) > 1 {
					tl := slices.Clone(f.Timeline)
					*list(&tl[i]) = slices.Delete(slices.Clone(names), j, j+1)
					out = append(out, with(tl))
				}
			}
		}
	}
	return out
}

// usedPods keeps the declared pods some event names.
func usedPods(f *spec.Scenario) []spec.Pod {
	named := map[string]bool{}
	for _, ev := range f.Timeline {
		for _, r := range ev.Add {
			named[r.Name], named[r.ReuseIPOf] = true, true
		}
		for _, n := range slices.Concat(ev.Delete, ev.ForceDelete, ev.LateDel, ev.RuntimeForgets) {
			named[n] = true
		}
	}
	var out []spec.Pod
	for _, p := range f.Pods {
		if named[p.Name] {
			out = append(out, p)
		}
	}
	return out
}

var unsafeName = regexp.MustCompile(`[^a-z0-9.-]+`)

func fileName(template string, o Outcome) string {
	n := fmt.Sprintf("%s-%s-%s-%d-%s-%s-%s", template, o.Point, o.Action, o.Occurrence, o.Memory, o.Mode, o.Policy)
	return strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(n), "-"), "-")
}

// Write saves a shrunk scenario as <dir>/<name>.yaml and returns the path.
func Write(dir string, f *spec.Scenario) (string, error) {
	b, err := yaml.Marshal(f)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, f.Name+".yaml")
	header := "# " + f.Description + "\n#\n#   go run ./scenarios/cmd/replay run " + path + "\n"
	return path, os.WriteFile(path, append([]byte(header), b...), 0o644)
}

func lower(s string) string { return strings.ToLower(s) }
