package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/vpccni/vpccni/scenarios/cmd/replay/shardtest"
)

// N shards run as N processes at once, merged by replay merge, give
// exactly the unsharded run's JSON (but for the time it took).
func TestShardsInParallelProcesses(t *testing.T) {
	dir := t.TempDir()
	bin := buildReplay(t, dir)
	common := []string{"explore", "--random", "--seed", "11", "--schedules", "36", "--policy", "default,ref-v1.11", "--no-shrink", "--workers", "1"}
	replayBin := func(args ...string) (int, string) { return runBin(t, bin, args...) }
	whole := filepath.Join(dir, "whole.json")
	if code, out := replayBin(append(common, "--json", whole)...); code != exitOK {
		t.Fatalf("unsharded: exit %d\n%s", code, out)
	}
	const n = 3
	var wg sync.WaitGroup
	shards := make([]string, n)
	for k := 1; k <= n; k++ {
		shards[k-1] = filepath.Join(dir, "shard"+string(rune('0'+k))+".json")
		wg.Go(func() {
			if code, out := replayBin(append(common, "--shard", string(rune('0'+k))+"/3", "--json", shards[k-1])...); code != exitOK {
				t.Errorf("shard %d: exit %d\n%s", k, code, out)
			}
		})
	}
	wg.Wait()
	merged := filepath.Join(dir, "merged.json")
	code, out := replayBin(append([]string{"merge", "--json", merged}, shards...)...)
	if code != exitOK || !strings.Contains(out, "36 schedules of 36 from 3 shards") {
		t.Fatalf("merge: exit %d\n%s", code, out)
	}
	if a, b := load(t, whole), load(t, merged); !reflect.DeepEqual(a, b) {
		t.Fatalf("merged shards differ from the unsharded run:\n%v\n%v", b, a)
	}
	if code, out := replayBin(append([]string{"merge"}, shards[:2]...)...); code != exitUsage || !strings.Contains(out, "missing: 3/3") {
		t.Errorf("two of three shards: exit %d\n%s", code, out)
	}
	if code, out := replayBin("merge", whole); code != exitUsage || !strings.Contains(out, "without --shard") {
		t.Errorf("an unsharded file: exit %d\n%s", code, out)
	}
	if code, out := replayBin(append(common, "--shard", "4/3")...); code != exitUsage || !strings.Contains(out, "want K/N") {
		t.Errorf("--shard 4/3: exit %d\n%s", code, out)
	}
}

// buildReplay builds the replay binary into dir, for tests that run it as
// separate processes (as machines would).
func buildReplay(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "replay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBin runs the binary: its exit code and its output (stdout and stderr).
func runBin(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// load reads a report's JSON as shardtest compares it.
func load(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return shardtest.Comparable(t, b)
}

func TestShardFromAnIndexedJob(t *testing.T) {
	t.Setenv("JOB_COMPLETION_INDEX", "4")
	if s, err := parseShard("job/8"); err != nil || s.String() != "5/8" {
		t.Fatalf("job/8 at index 4: %v %v", s, err)
	}
	t.Setenv("JOB_COMPLETION_INDEX", "8")
	if _, err := parseShard("job/8"); err == nil {
		t.Error("index 8 of 8 shards was accepted")
	}
	t.Setenv("JOB_COMPLETION_INDEX", "")
	if _, err := parseShard("job/8"); err == nil || !strings.Contains(err.Error(), "Indexed Job") {
		t.Errorf("no index: %v", err)
	}
}
