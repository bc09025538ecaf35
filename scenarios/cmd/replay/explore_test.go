package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const small = `
name: add-delete
modes: [ipv4]
pods: [{name: default/web-0, device: 1}]
timeline:
  - add: [web-0]
  - delete: [web-0]
  - settle: {}
expect: {default: clean}
`

// TestExploreCLI: the matrix, the counterexamples written and replayable,
// JSON, and the exit status that says whether vpccni's flow is clean.
func TestExploreCLI(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "t.yaml")
	os.WriteFile(tmpl, []byte(small), 0o644)
	out := filepath.Join(dir, "out")
	js := filepath.Join(dir, "r.json")
	code, stdout, errs := replay("explore", "--policy", "default,ref-current", "--action", "error", "--memory", "kept",
		"--out", out, "--json", js, tmpl)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errs)
	}
	for _, want := range []string{"POLICY", "default      ipv4                 clean", "ref-current  ipv4", "LEAK", "schedules in"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no counterexample written")
	}
	for _, f := range files {
		if code, o, e := replay("run", "--quiet", f); code != exitOK {
			t.Errorf("%s does not replay: exit %d\n%s%s", f, code, o, e)
		}
	}
	var rep struct {
		Schedules int `json:"schedules"`
		Outcomes  []struct {
			Verdict string `json:"verdict"`
		} `json:"outcomes"`
	}
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Schedules == 0 || len(rep.Outcomes) != rep.Schedules {
		t.Fatalf("json: %v %+v", err, rep)
	}
}

func TestExploreUsage(t *testing.T) {
	for _, args := range [][]string{{"explore"}, {"explore", "--action", "explode", lib}, {"explore", "--memory", "some", lib},
		{"explore", "--mode", "ipv5", lib}, {"explore", "nope.yaml"}} {
		if code, _, _ := replay(args...); code != exitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
	code, out, _ := replay("failpoints")
	if code != exitOK || !strings.Contains(out, "driver/del-rule-to-pod") || !strings.Contains(out, "ipamd/del/before-checkpoint") {
		t.Fatalf("failpoints: %d %s", code, out)
	}
}

// TestExploreRandomCLI: the seed first, the matrix, the rate, JSON; the
// same seed gives the same report; a legacy flow's failures are shrunk to
// files that replay; vpccni's flow alone exits 0.
func TestExploreRandomCLI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	js := filepath.Join(dir, "r.json")
	code, stdout, errs := replay("explore", "--random", "--seed", "5", "--schedules", "24", "--mode", "ipv4,ipv6",
		"--policy", "default,ref-v1.10", "--out", out, "--json", js)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errs)
	}
	if !strings.HasPrefix(stdout, "seed 5 (replay explore --random --seed 5 gives the same schedules)\n") {
		t.Errorf("the seed is not printed first:\n%s", stdout)
	}
	for _, want := range []string{"POLICY", "default      ipv4                 clean 6", "ref-v1.10    ipv4", "24 schedules in", "/s), seed 5"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "random-5-*-ref-v1.10-*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no counterexample of ref-v1.10 written:\n%s", stdout)
	}
	for _, f := range files {
		if code, o, e := replay("run", "--quiet", f); code != exitOK {
			t.Errorf("%s does not replay: exit %d\n%s%s", f, code, o, e)
		}
	}
	var rep struct {
		Seed      uint64 `json:"seed"`
		Schedules int    `json:"schedules"`
		Matrix    map[string]map[string]map[string]int
		Failures  []struct {
			Index  int    `json:"index"`
			Policy string `json:"policy"`
		} `json:"failures"`
	}
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Seed != 5 || rep.Schedules != 24 || len(rep.Failures) == 0 {
		t.Fatalf("json: %v %+v", err, rep)
	}
	_, again, _ := replay("explore", "--random", "--seed", "5", "--schedules", "24", "--mode", "ipv4,ipv6",
		"--policy", "default,ref-v1.10", "--no-shrink", "--json", "-")
	var rep2 struct {
		Failures []struct {
			Index int `json:"index"`
		} `json:"failures"`
	}
	if err := json.Unmarshal([]byte(again), &rep2); err != nil || len(rep2.Failures) != len(rep.Failures) {
		t.Fatalf("the same seed gave another run: %v, %d failures then %d", err, len(rep.Failures), len(rep2.Failures))
	}
	for i := range rep.Failures {
		if rep.Failures[i].Index != rep2.Failures[i].Index {
			t.Fatalf("failure %d: schedule %d, then %d", i, rep.Failures[i].Index, rep2.Failures[i].Index)
		}
	}
}

// TestExploreRandomUsage: flags that do not go together, and bad values,
// exit 2 before anything runs.
func TestExploreRandomUsage(t *testing.T) {
	for _, args := range [][]string{
		{"explore", "--random", lib},
		{"explore", "--random", "--action", "crash"},
		{"explore", "--random", "--seed", "x"},
		{"explore", "--random", "--seed", "-1"},
		{"explore", "--random", "--schedules", "-3"},
		{"explore", "--random", "--mode", "ipv5"},
		{"explore", "--random", "--policy", "ref-v9"},
		{"explore", "--seed", "3", lib},
		{"explore", "--random", "--for", "soon"},
	} {
		if code, _, errs := replay(args...); code != exitUsage || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	code, out, _ := replay("explore", "--help")
	if code != exitOK || !strings.Contains(out, "--random") || !strings.Contains(out, "--schedules N") {
		t.Errorf("--help: %d\n%s", code, out)
	}
}
