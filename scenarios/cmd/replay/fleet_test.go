package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fleetFile = "../../fleets/autoscaler-20-nodes-hour.yaml"

func TestFleet(t *testing.T) {
	dir := t.TempDir()
	cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
	code, out, errs := replay("fleet", "--policy", "ref-v1.11", "--findings", "2", "--cpuprofile", cpu, "--memprofile", heap, fleetFile)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"== autoscaler-20-nodes-hour under ref-v1.11", "MISROUTE: traffic from", "first finding, on node", "its kernel:",
		"rule 512", "ref-v1.11        20", "as expected", "CNI calls (", "/s), heap", "peak RSS", "(GOGC 1600, memory limit "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{cpu, heap} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v (want a non-empty file)", f, err)
		}
	}
}

func TestFleetJSONAndMismatch(t *testing.T) {
	b, err := os.ReadFile(fleetFile)
	if err != nil {
		t.Fatal(err)
	}
	wrong := strings.Replace(string(b), "ref-v1.11: [misroute, leak]", "ref-v1.11: [clean]", 1)
	f := filepath.Join(t.TempDir(), "wrong.yaml")
	if err := os.WriteFile(f, []byte(wrong), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := replay("fleet", "--policy", "ref-v1.11", "--json", "-", f)
	if code != exitMismatch {
		t.Fatalf("a wrong expectation: exit %d, want %d", code, exitMismatch)
	}
	var rep struct {
		Runs []struct {
			Policy string         `json:"policy"`
			Match  bool           `json:"match"`
			ByKind map[string]int `json:"byKind"`
		} `json:"runs"`
	}
	err = json.Unmarshal([]byte(out), &rep)
	if rs := rep.Runs; err != nil || len(rs) != 1 || rs[0].Match || rs[0].ByKind["MISROUTE"] == 0 {
		t.Fatalf("--json -: %v %+v\n%s", err, rep, out)
	}
}

func TestFleetBadInput(t *testing.T) {
	for _, args := range [][]string{{"fleet"}, {"fleet", "--policy", "nosuch", fleetFile}, {"fleet", lib}, {"fleet", "--seed", "x", fleetFile},
		{"fleet", "--cpuprofile", "/nonexistent/dir/cpu.pprof", fleetFile}, {"fleet", "--memprofile", "/nonexistent/dir/heap.pprof", fleetFile}} {
		if code, _, errs := replay(args...); code != exitUsage || errs == "" {
			t.Errorf("%v: exit %d (%q), want %d with a message", args, code, errs, exitUsage)
		}
	}
}
