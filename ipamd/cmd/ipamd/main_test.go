package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestUsage(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb, nil); code != 0 {
			t.Fatalf("%s: exit %d", arg, code)
		}
		for _, want := range []string{"--socket PATH", "/var/run/aws-node/ipamd.sock", "--cloud memory", "--instance-type",
			"m5.large", "c5.18xlarge", "--log-level", "--log-format", "--reject-version-mismatch", "--version",
			"--enable-pod-eni", "ENABLE_POD_ENI=true", "--pod-eni-source kubernetes|static", "--kubeconfig PATH",
			"--pod-eni-file PATH", "vpc.amazonaws.com/pod-eni", `"vlanID": 7`} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: help lacks %q", arg, want)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--cloud", "gcp"}, {"--cloud", "aws", "--instance-type", "m5.large"}, {"--instance-type", "x1.banana"}, {"--log-level", "loud"},
		{"--log-format", "xml"}, {"--nope"}, {"extra"},
	} {
		var out, errb bytes.Buffer
		code := run(append(args, "--socket", filepath.Join(t.TempDir(), "s")), &out, &errb, nil)
		if code != 2 || !strings.HasPrefix(errb.String(), "ipamd: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	run([]string{"--cloud", "gcp"}, &bytes.Buffer{}, &errb, nil)
	if !strings.Contains(errb.String(), `"memory" or "aws"`) {
		t.Errorf("--cloud error does not name the supported value: %q", errb.String())
	}
}

// TestServeUntilSignal runs the daemon in-process: it serves, logs one
// startup line, and on SIGTERM stops, removes its socket and returns 0.
func TestServeUntilSignal(t *testing.T) {
	dir, err := os.MkdirTemp("", "ipamd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "run", "ipamd.sock")
	stop := make(chan os.Signal, 1)
	var errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run([]string{"--socket", sock, "--instance-type", "t3.medium", "--log-format", "json"}, &bytes.Buffer{}, &errb, stop)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after stop: %v", err)
	}
	logs := errb.String()
	if n := strings.Count(logs, `"msg":"ipamd serving"`); n != 1 || !strings.Contains(logs, `"pool":15`) || !strings.Contains(logs, sock) {
		t.Fatalf("startup line: %s", logs)
	}
}
