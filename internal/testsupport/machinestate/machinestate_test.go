package machinestate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guard fails once the path it watches appears, and only then.
func TestGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host")
	g := Watch(path, "a reference binary ran outside the jail")
	if err := g.Check(); err != nil {
		t.Fatalf("nothing created: %v", err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	err := g.Check()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "outside the jail") {
		t.Fatalf("created: %v", err)
	}
	if err := Watch(path, "").Check(); err != nil {
		t.Fatalf("there before the run: %v", err)
	}
}

// A guard on a path that was there before the run fails once a watched
// file under it is written, and not for other files.
func TestGuardOnAPathAlreadyThere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host")
	log := filepath.Join(path, "var/log/aws-routed-eni/ipamd.log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, []byte("the node's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := Watch(path, "a reference binary ran outside the jail", "var/log/aws-routed-eni/ipamd.log")
	if err := os.WriteFile(filepath.Join(path, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatalf("an unwatched file: %v", err)
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"msg\":\"Constructed new logger instance\"}\n")
	f.Close()
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), log) {
		t.Fatalf("the watched log written: %v", err)
	}
}
