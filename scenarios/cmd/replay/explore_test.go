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
