// Package machinestate guards the machine's own vpc-cni state directory
// (the netconf's default stateDir) against tests: every test netconf must
// name a temporary stateDir, and a test run that creates the machine's
// fails rather than leave attachment records on the machine.
package machinestate

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
// reference plugin's log directory, /host, for one), and files under it
// a run must not write when it was already there (a machine may have a
// /host of its own; the reference's log in it must not grow).
type Guard struct {
	Path    string
	Existed bool   // before the run
	Why     string // what creating it would mean
	// files are the watched files under Path (relative), as they were.
	files map[string]fileState
}

// fileState is what tells a file changed: gone or there, size, mtime.
type fileState struct {
	there bool
	size  int64
	mtime int64
}

func stat(path string) fileState {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileState{}
	}
	return fileState{there: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

// Watch notes whether path exists now, and the state of the files under
// it (relative paths) a run must not write.
func Watch(path, why string, files ...string) Guard {
	g := Guard{Path: path, Existed: exists(path), Why: why, files: map[string]fileState{}}
	for _, f := range files {
		g.files[f] = stat(filepath.Join(path, f))
	}
	return g
}

// Check is an error when the path exists now and did not before, or when
// a watched file under it appeared, went or changed.
func (g Guard) Check() error {
	if !g.Existed && exists(g.Path) {
		return fmt.Errorf("the tests created the machine's %s: %s", g.Path, g.Why)
	}
	for _, f := range slices.Sorted(maps.Keys(g.files)) {
		if now := stat(filepath.Join(g.Path, f)); now != g.files[f] {
			return fmt.Errorf("the tests wrote the machine's %s: %s", filepath.Join(g.Path, f), g.Why)
		}
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
