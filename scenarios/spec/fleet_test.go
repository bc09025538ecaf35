package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodFleet = `
name: f
seed: 1
duration: 1h
nodeGroups:
  - name: ng
    nodes: 2
    node: {warmPool: {warmIPTarget: 2}}
pods: {perNode: 3}
drains: {perHour: 2}
expect: {default: [clean], ref-v1.11: [misroute, leak]}
`

func TestParseFleet(t *testing.T) {
	f, err := ParseFleet([]byte(goodFleet))
	if err != nil {
		t.Fatal(err)
	}
	g := f.NodeGroups[0].Node
	if g.InstanceType != "m5.large" || g.Start != "fresh" || g.KubeletRetries != 5 || f.Drains.Takes.Duration == 0 || f.Drains.Memory != "kept" {
		t.Fatalf("defaults not applied: %+v %+v", g, f.Drains)
	}
	if p := f.Policies(); p[0] != "default" || len(p) != 2 {
		t.Fatalf("policies %v: want default first", p)
	}
}

// Every malformed fleet is refused with a message naming what is wrong.
func TestParseFleetRefuses(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"name: f", "name: ''", "name is missing"},
		{"duration: 1h", "duration: 0s", "duration is missing"},
		{"duration: 1h", "duration: 25h", "not between 0 and 24h"},
		{"nodes: 2", "nodes: 0", "nodes 0 is not between"},
		{"nodes: 2", "nodes: 1", "drains need at least two nodes"},
		{"- name: ng", "- name: NG", "want a unique lower-case name"},
		{"node: {warmPool: {warmIPTarget: 2}}", "node: {}", "warmPool is required"},
		{"node: {warmPool: {warmIPTarget: 2}}", "node: {start: full, warmPool: {warmIPTarget: 2}}", "start fresh"},
		{"perHour: 2}", "perHour: 2, cancelPercent: 101}", "cancelPercent 101"},
		{"perHour: 2}", "perHour: 2, memory: gone}", `drains.memory "gone"`},
		{"perHour: 2}", "perHour: 2, takes: 2h}", "not shorter than the duration"},
		{"[clean]", "[clean, leak]", "want [clean] or kinds"},
		{"[misroute, leak]", "[sideways]", `"sideways"`},
		{"pods: {perNode: 3}", "pods: {perNode: 3, bogus: 1}", "unknown field"},
		{"pods: {perNode: 3}", "pods: {perNode: 3, rampUp: 1h}", "pods.rampUp 1h0m0s is not between 0 and the duration"},
		{"pods: {perNode: 3}", "pods: {perNode: 3, rampUp: -1m}", `duration "-1m" is not between`},
		{"expect: {default: [clean], ref-v1.11: [misroute, leak]}", "expect: {}", "expect is empty"},
		{"seed: 1", "seed: 1\ntimeline: [{settle: {}}]", "single-node scenario"},
	} {
		in := strings.Replace(goodFleet, c.from, c.to, 1)
		if in == goodFleet {
			t.Fatalf("case %q does not change the fleet", c.from)
		}
		_, err := ParseFleet([]byte(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: got %v, want an error with %q", c.from, c.to, err, c.want)
		}
	}
}

// LoadFleet names the file in its errors and keeps the content's hash,
// by which the shards of a sharded run tell they read the same file.
func TestLoadFleet(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte(goodFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(goodFleet+"description: another\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := LoadFleet(a)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(goodFleet))
	if fa.File != a || fa.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("File %q SHA256 %q, want %q and the content's", fa.File, fa.SHA256, a)
	}
	if fb, err := LoadFleet(b); err != nil || fb.SHA256 == fa.SHA256 {
		t.Fatalf("another content, the same hash: %v", err)
	}
	if _, err := LoadFleet(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
	if err := os.WriteFile(b, []byte(goodFleet+"podz: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFleet(b); err == nil || !strings.Contains(err.Error(), "b.yaml: not a fleet") {
		t.Errorf("an unknown key: %v", err)
	}
}

// Every fleet of the library loads: the scale probe, which make test does
// not run, cannot rot unnoticed.
func TestFleetLibraryLoads(t *testing.T) {
	files, err := filepath.Glob("../fleets/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("fleets: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := LoadFleet(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
