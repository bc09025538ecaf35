package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogSettings: the reference's AWS_VPC_K8S_CNI_LOGLEVEL (any case)
// and AWS_VPC_K8S_CNI_LOG_FILE decide what is logged and where; a level
// the reference would quietly read as debug, or a relative path, is a
// usage error naming the variable.
func TestLogSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "log", "ipamd.log")
	t.Setenv(envLogLevel, "WARN")
	t.Setenv(envLogFile, file)
	// A setting vpccni does not honour yet: ipamd warns about it.
	t.Setenv("AWS_EXTERNAL_SERVICE_CIDRS", "10.9.0.0/16")
	var out, errb bytes.Buffer
	if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &out, &errb, stopped()); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	logs := string(b)
	if !strings.Contains(logs, "setting not honoured") || strings.Contains(logs, "ipamd serving") || errb.Len() > 0 || out.Len() > 0 {
		t.Fatalf("WARN to a file: file %q, stdout %q, stderr %q", logs, out.String(), errb.String())
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("log file mode: %v %v (the logs name every pod: not for other users)", fi.Mode(), err)
	}

	t.Setenv(envLogLevel, "Debug")
	t.Setenv(envLogFile, "STDOUT")
	out.Reset()
	errb.Reset()
	if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &out, &errb, stopped()); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ipamd serving") || errb.Len() > 0 {
		t.Fatalf("Debug to stdout: stdout %q, stderr %q", out.String(), errb.String())
	}

	for env, value := range map[string]string{envLogLevel: "warning", envLogFile: "logs/ipamd.log"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, value)
			var errb bytes.Buffer
			if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &bytes.Buffer{}, &errb, stopped()); code != exitUsage || !strings.Contains(errb.String(), env) {
				t.Fatalf("%s=%s: exit %d, %q", env, value, code, errb.String())
			}
		})
	}
}

// TestLogRotation: the file rotates at its size, the old one kept beside
// it (compressed once the rotation's background work is done).
func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	f := rotatingFile(filepath.Join(dir, "ipamd.log"), 1)
	log, err := logger(f, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1000)
	for range 1500 { // 1.5 MB over a 1 MB limit
		log.Info("filler", "x", line)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, _ := filepath.Glob(filepath.Join(dir, "ipamd-*.log.gz"))
		if len(names) == 1 {
			break
		}
		if time.Now().After(deadline) {
			all, _ := os.ReadDir(dir)
			t.Fatalf("no compressed rotated file after 10s: %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ipamd.log")); err != nil || fi.Size() >= 1<<20 {
		t.Fatalf("current file after rotation: %v, %v", fi, err)
	}
}
