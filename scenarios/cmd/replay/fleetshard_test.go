package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// smallFleet is three nodes for ten simulated minutes: under a second a
// run, and ref-v1.11 leaks in it.
const smallFleet = `name: small
seed: 5
duration: 10m
nodeGroups:
  - name: ng-a
    nodes: 3
    maxPods: 20
    node:
      instanceType: m5.large
      warmPool: {warmIPTarget: 2, minimumIPTarget: 4}
pods: {perNode: 8, createPerHour: 120, deletePerHour: 120}
drains: {perHour: 12, evictAwsNodeFirst: true, cancelPercent: 75, takes: 2m, memory: lost}
faults: {ipamdRestartsPerHour: 6, memory: lost}
expect:
  default: [clean]
  ref-v1.11: [leak]
`

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Three shards of two seeds under two policies (four runs), merged in
// process, are the unsharded run's JSON byte for byte; merge refuses
// every set that is not the shards of one run, naming the shard.
func TestFleetShardsMerge(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, filepath.Join(dir, "small.yaml"), smallFleet)
	whole := filepath.Join(dir, "whole.json")
	if code, out, errs := replay("fleet", "--seeds", "2", "--json", whole, f); code != exitOK {
		t.Fatalf("unsharded: exit %d\n%s\n%s", code, out, errs)
	}
	shards := make([]string, 3)
	for _, k := range []int{3, 1, 2} {
		shards[k-1] = filepath.Join(dir, fmt.Sprintf("shard%d.json", k))
		code, out, errs := replay("fleet", "--seeds", "2", "--shard", fmt.Sprintf("%d/3", k), "--json", shards[k-1], f)
		if code != exitOK || !strings.Contains(out, fmt.Sprintf("shard %d/3: runs", k)) {
			t.Fatalf("shard %d/3: exit %d\n%s\n%s", k, code, out, errs)
		}
	}
	merged := filepath.Join(dir, "merged.json")
	code, out, errs := replay(append([]string{"merge", "--json", merged}, shards...)...)
	if code != exitOK || !strings.Contains(out, "4 runs of small from 3 shards, seeds 5 to 6") || !strings.Contains(out, "6    ref-v1.11") {
		t.Fatalf("merge: exit %d\n%s\n%s", code, out, errs)
	}
	if a, b := readFile(t, whole), readFile(t, merged); !bytes.Equal(a, b) {
		t.Fatalf("merged shards differ from the unsharded run:\n%s\n%s", b, a)
	}

	// Shards of other runs: another seed, another file of the same name.
	otherSeed := filepath.Join(dir, "seed9.json")
	if code, _, errs := replay("fleet", "--seeds", "2", "--seed", "9", "--shard", "2/3", "--json", otherSeed, f); code != exitOK {
		t.Fatalf("--seed 9: exit %d: %s", code, errs)
	}
	g := writeFile(t, filepath.Join(dir, "other.yaml"), strings.Replace(smallFleet, "perNode: 8", "perNode: 7", 1))
	otherFile := filepath.Join(dir, "otherfile.json")
	if code, _, errs := replay("fleet", "--seeds", "2", "--shard", "2/3", "--json", otherFile, g); code != exitOK {
		t.Fatalf("other file: exit %d: %s", code, errs)
	}
	// A shard cut short, one edited, one claiming a shard of no run.
	edit := func(name string, change func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(readFile(t, shards[0]), &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, _ := json.Marshal(m)
		return writeFile(t, filepath.Join(dir, name), string(b))
	}
	cut := edit("cut.json", func(m map[string]any) { m["runs"] = m["runs"].([]any)[:1] })
	swapped := edit("swapped.json", func(m map[string]any) { m["runs"].([]any)[1].(map[string]any)["policy"] = "default" })
	beyond := edit("beyond.json", func(m map[string]any) { m["shard"] = map[string]any{"k": 4, "n": 3} })
	explore := writeFile(t, filepath.Join(dir, "explore.json"), `{"seed": 1, "shard": {"k": 1, "n": 3}}`)
	for _, c := range []struct {
		name  string
		files []string
		want  string
	}{
		{"missing", shards[:2], "shards missing: 3/3 (of fleet small"},
		{"doubled", append(shards[:3:3], shards[1]), "shard 2/3 is given twice: " + shards[1]},
		{"another seed", []string{shards[0], otherSeed, shards[2]}, otherSeed + " (shard 2/3) is of another run: fleet small (file sha256"},
		{"another file", []string{shards[0], otherFile, shards[2]}, otherFile + " (shard 2/3) is of another run"},
		{"unsharded", []string{whole}, whole + " was run without --shard"},
		{"cut short", []string{cut, shards[1], shards[2]}, cut + " (shard 1/3): run 3 is missing"},
		{"edited", []string{swapped, shards[1], shards[2]}, swapped + " (shard 1/3): run 3 is seed 6 under default, want seed 6 under ref-v1.11"},
		{"no such shard", []string{shards[0], beyond}, beyond + `: shard "4/3": want K/N`},
		{"with an exploration", []string{shards[0], explore}, "mix fleet runs (" + shards[0] + ") and explorations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := replay(append([]string{"merge"}, c.files...)...)
			if code != exitUsage || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stderr %q, want %d and %q\n%s", code, errs, exitUsage, c.want, out)
			}
		})
	}
}

// A run not as the file expects makes the merge exit 1, as the unsharded
// run does; --shard without --json is refused before anything runs.
func TestFleetShardsMismatchAndUsage(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, filepath.Join(dir, "wrong.yaml"), strings.Replace(smallFleet, "ref-v1.11: [leak]", "ref-v1.11: [clean]", 1))
	var shards []string
	for k := 1; k <= 2; k++ {
		s := filepath.Join(dir, fmt.Sprintf("s%d.json", k))
		code, _, errs := replay("fleet", "--shard", fmt.Sprintf("%d/2", k), "--json", s, f)
		if want := []int{exitOK, exitMismatch}[k-1]; code != want {
			t.Fatalf("shard %d/2 (run %d): exit %d, want %d: %s", k, k-1, code, want, errs)
		}
		shards = append(shards, s)
	}
	if code, out, errs := replay(append([]string{"merge"}, shards...)...); code != exitMismatch || !strings.Contains(out, "NOT as expected") {
		t.Fatalf("merge: exit %d, want %d\n%s\n%s", code, exitMismatch, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "--shard", "1/2", f}, "--shard needs --json"},
		{[]string{"fleet", "--shard", "3/2", "--json", "-", f}, "want K/N"},
		{[]string{"fleet", "--seeds", "0", f}, "--seeds 0: want 1 to"},
		{[]string{"fleet", "--seeds", "2", "--seed", "9223372036854775807", f}, "passes the largest seed"},
	} {
		if code, _, errs := replay(c.args...); code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errs, c.want)
		}
	}
}

// N shards as N processes at once, merged by replay merge as another,
// give exactly the unsharded run's JSON.
func TestFleetShardsInParallelProcesses(t *testing.T) {
	dir := t.TempDir()
	bin := buildReplay(t, dir)
	f := writeFile(t, filepath.Join(dir, "small.yaml"), smallFleet)
	whole := filepath.Join(dir, "whole.json")
	if code, out := runBin(t, bin, "fleet", "--seeds", "2", "--json", whole, f); code != exitOK {
		t.Fatalf("unsharded: exit %d\n%s", code, out)
	}
	const n = 3
	shards := make([]string, n)
	var wg sync.WaitGroup
	for k := 1; k <= n; k++ {
		shards[k-1] = filepath.Join(dir, fmt.Sprintf("shard%d.json", k))
		wg.Go(func() {
			if code, out := runBin(t, bin, "fleet", "--seeds", "2", "--shard", fmt.Sprintf("%d/%d", k, n), "--json", shards[k-1], f); code != exitOK {
				t.Errorf("shard %d: exit %d\n%s", k, code, out)
			}
		})
	}
	wg.Wait()
	merged := filepath.Join(dir, "merged.json")
	if code, out := runBin(t, bin, append([]string{"merge", "--json", merged}, shards...)...); code != exitOK {
		t.Fatalf("merge: exit %d\n%s", code, out)
	}
	if a, b := readFile(t, whole), readFile(t, merged); !bytes.Equal(a, b) {
		t.Fatalf("merged shards differ from the unsharded run:\n%s\n%s", b, a)
	}
}
