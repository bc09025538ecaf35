package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestInstallFileReplacesAtomically: the destination is a new inode with
// the new bytes and mode (a running binary's inode is left as it was),
// and no temporary file is left in the directory.
func TestInstallFileReplacesAtomically(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "vpc-cni"), "new", 0o700)
	write(t, filepath.Join(dst, "vpc-cni"), "old", 0o755)
	old, err := os.Open(filepath.Join(dst, "vpc-cni"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := InstallFile(filepath.Join(src, "vpc-cni"), filepath.Join(dst, "vpc-cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "vpc-cni"))
	if b, _ := os.ReadFile(filepath.Join(dst, "vpc-cni")); err != nil || string(b) != "new" || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed %q mode %v (%v)", b, fi.Mode(), err)
	}
	if b := make([]byte, 3); func() bool { n, _ := old.ReadAt(b, 0); return n != 3 || string(b) != "old" }() {
		t.Error("the old file's inode was written over")
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestInstallRefusesAMissingDirectory: a hostPath not mounted is named,
// and nothing is created in its place.
func TestInstallRefusesAMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := WriteFile(filepath.Join(dir, ConflistName), []byte("{}"), 0o644)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "hostPath") {
		t.Fatalf("%v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("the directory was created")
	}
}

// TestInstallBinaries: every executable regular file but those skipped,
// in name order; not a directory, not a data file.
func TestInstallBinaries(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for _, n := range []string{"vpc-cni", "portmap", "loopback", "vpccni-node"} {
		write(t, filepath.Join(src, n), n, 0o755)
	}
	write(t, filepath.Join(src, "README"), "x", 0o644)
	os.Mkdir(filepath.Join(src, "sub"), 0o755)
	names, err := InstallBinaries(src, dst, map[string]bool{"vpccni-node": true})
	if err != nil || strings.Join(names, ",") != "loopback,portmap,vpc-cni" {
		t.Fatalf("%v %v", names, err)
	}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(dst, n)); err != nil || string(b) != n {
			t.Errorf("%s: %q %v", n, b, err)
		}
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 3 {
		t.Errorf("dst holds %v", entries)
	}
	if _, err := InstallBinaries(t.TempDir(), dst, nil); err == nil || !strings.Contains(err.Error(), "no executable") {
		t.Errorf("an empty image directory: %v", err)
	}
}
