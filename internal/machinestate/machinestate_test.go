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
