// Package machinestate guards the machine's own vpc-cni state directory
// (the netconf's default stateDir) against tests: every test netconf must
// name a temporary stateDir, and a test run that creates the machine's
// fails rather than leave attachment records on the machine.
package machinestate

import (
	"fmt"
	"os"
	"testing"
)

// Dir is the plugin's default stateDir (plugin.DefaultStateDir; not
// imported, so that any package's tests can use this one).
const Dir = "/var/lib/cni/vpc-cni"

// Exists reports whether the machine has the directory.
func Exists() bool { return exists(Dir) }

// Check is the guard's verdict: an error when the directory exists now
// and did not before.
func Check(before bool) error {
	return Guard{Path: Dir, Existed: before, Why: "a netconf without a temporary stateDir ran the plugin"}.Check()
}

// Guard watches another path of the machine a run must not create (the
// reference plugin's log directory, /host, for one).
type Guard struct {
	Path    string
	Existed bool   // before the run
	Why     string // what creating it would mean
}

// Watch notes whether path exists now.
func Watch(path, why string) Guard { return Guard{Path: path, Existed: exists(path), Why: why} }

// Check is an error when the path exists now and did not before.
func (g Guard) Check() error {
	if !g.Existed && exists(g.Path) {
		return fmt.Errorf("the tests created the machine's %s: %s", g.Path, g.Why)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Main runs m and fails the run if it created the machine's directory.
func Main(m *testing.M) int {
	before := Exists()
	code := m.Run()
	if err := Check(before); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
