package deploy

// The Makefile's deploy targets run without the tools they need.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeTargetsNeedTools runs the deploy targets with a PATH that lacks
// their tools: each must stop with a message naming the missing one (and,
// with a docker that cannot reach a daemon, say so) before running
// anything.
func TestMakeTargetsNeedTools(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal("the Makefile's test needs make (apt-get install make)")
	}
	bin := t.TempDir()
	stub := func(name string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\necho \"$0 $*: stub\" >&2\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(target string) string {
		cmd := exec.Command(makeBin, "--no-print-directory", target)
		cmd.Dir = repoRoot
		cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("make %s succeeded with PATH=%s:\n%s", target, bin, out)
		}
		if bytes.Contains(out, []byte(": stub")) {
			t.Fatalf("make %s ran a tool before its checks:\n%s", target, out)
		}
		return string(out)
	}
	steps := []struct {
		add  string            // tool stub put on PATH first
		want map[string]string // target -> its message
	}{
		{"", map[string]string{
			"image": "make image: needs docker", "kind-up": "make kind-up: needs docker",
			"kind-load": "make kind-load: needs docker", "kind-down": "make kind-down: needs docker",
		}},
		{"docker", map[string]string{
			"image": "make image: docker is installed but no Docker daemon answers", "kind-up": "make kind-up: needs kind",
			"kind-load": "make kind-load: needs kind", "kind-down": "make kind-down: needs kind",
		}},
		{"kind", map[string]string{
			"kind-up": "make kind-up: docker is installed but no Docker daemon answers", "kind-load": "make kind-load: needs kubectl",
		}},
	}
	for _, s := range steps {
		if s.add != "" {
			stub(s.add)
		}
		for target, want := range s.want {
			if out := run(target); !strings.Contains(out, want) {
				t.Errorf("make %s with %v on PATH: want %q in\n%s", target, s.add, want, out)
			}
		}
	}
}
