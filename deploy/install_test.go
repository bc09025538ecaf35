package deploy

// install-cni.sh run for real on temporary directories, and the Makefile's
// deploy targets run without the tools they need.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installEnv is the install-cni init container's environment with every
// directory moved under root: the same names the manifest sets.
func installEnv(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := parse(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.daemonSet()
	if err != nil {
		t.Fatal(err)
	}
	c, err := container(ds, true, installContainer)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for name, v := range envOf(c) {
		env[name] = filepath.Join(root, v)
	}
	return env
}

func runScript(t *testing.T, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", filepath.Join(repoRoot, scriptPath))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantFile checks a file's content and mode.
func wantFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
		return
	}
	if string(b) != content {
		t.Errorf("%s = %q, want %q", p, b, content)
	}
	if fi, err := os.Stat(p); err == nil && fi.Mode().Perm() != mode {
		t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), mode)
	}
}

func TestInstallScript(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatal("the install script's test needs /bin/sh (apt-get install dash)")
	}
	root := t.TempDir()
	env := installEnv(t, root)
	imgBin, conf, hostBin, hostNet := env["IMAGE_CNI_BIN_DIR"], env["IMAGE_CNI_CONFLIST"], env["HOST_CNI_BIN_DIR"], env["HOST_CNI_NET_DIR"]
	writeFile(t, filepath.Join(imgBin, "vpc-cni"), "vpc-cni v1")
	writeFile(t, filepath.Join(imgBin, "portmap"), "image portmap")
	writeFile(t, filepath.Join(imgBin, "loopback"), "image loopback")
	conflist, err := os.ReadFile(filepath.Join(repoRoot, conflistPath))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, conf, string(conflist))
	writeFile(t, filepath.Join(hostBin, "portmap"), "the node's portmap")
	writeFile(t, filepath.Join(hostNet, "05-other.conflist"), "someone else's")

	if out, err := runScript(t, env); err != nil {
		t.Fatalf("install-cni.sh: %v\n%s", err, out)
	}
	wantFile(t, filepath.Join(hostBin, "vpc-cni"), "vpc-cni v1", 0o755)
	wantFile(t, filepath.Join(hostBin, "portmap"), "the node's portmap", 0o600)
	wantFile(t, filepath.Join(hostBin, "loopback"), "image loopback", 0o755)
	wantFile(t, filepath.Join(hostNet, filepath.Base(conflistPath)), string(conflist), 0o644)
	wantFile(t, filepath.Join(hostNet, "05-other.conflist"), "someone else's", 0o600)

	// An upgrade replaces the plugin by renaming a new file over it: a
	// runtime executing the old one keeps its inode, never half a file.
	before, err := os.Stat(filepath.Join(hostBin, "vpc-cni"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(imgBin, "vpc-cni"), "vpc-cni v2")
	if out, err := runScript(t, env); err != nil {
		t.Fatalf("install-cni.sh again: %v\n%s", err, out)
	}
	wantFile(t, filepath.Join(hostBin, "vpc-cni"), "vpc-cni v2", 0o755)
	if after, err := os.Stat(filepath.Join(hostBin, "vpc-cni")); err != nil || os.SameFile(before, after) {
		t.Errorf("vpc-cni was written over in place (or is gone: %v), not replaced by a rename", err)
	}
	for _, dir := range []string{hostBin, hostNet} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.Contains(e.Name(), "vpccni-install") {
				t.Errorf("temporary file %s left behind", filepath.Join(dir, e.Name()))
			}
		}
	}

	// A missing variable or directory stops it before it writes anything.
	for _, tc := range []struct {
		name, drop, set, want string
	}{
		{"variable not set", "HOST_CNI_NET_DIR", "", "HOST_CNI_NET_DIR"},
		{"directory not mounted", "", "HOST_CNI_NET_DIR", "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := t.TempDir()
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			e["HOST_CNI_BIN_DIR"] = fresh
			delete(e, tc.drop)
			if tc.set != "" {
				e[tc.set] = filepath.Join(fresh, "missing")
			}
			out, err := runScript(t, e)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("err %v, output %q: want a failure naming %q", err, out, tc.want)
			}
			if entries, _ := os.ReadDir(fresh); len(entries) != 0 {
				t.Errorf("it wrote %v before failing", entries)
			}
		})
	}
}

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
