package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// dirEntries lists the names in dir, to catch temporary files left behind.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileCreatesDirectoryAndPrivateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var", "run", "aws-node")
	path := filepath.Join(dir, "ipam.json")
	in := File{Allocations: referenceContent.Allocations} // Version left empty on purpose
	if err := WriteFile(path, in); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("file mode %v, want 0600", mode)
	}
	dirInfo, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The umask may only remove bits; 0755 must not have gained any.
	if mode := dirInfo.Mode().Perm(); mode&^0o755 != 0 {
		t.Errorf("directory mode %v has bits beyond 0755", mode)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read back: %v", err)
	}
	if !reflect.DeepEqual(*got, referenceContent) {
		t.Fatalf("read back %+v, want %+v (with Version filled in)", *got, referenceContent)
	}
	if names := dirEntries(t, dir); !reflect.DeepEqual(names, []string{"ipam.json"}) {
		t.Errorf("directory holds %v, want only ipam.json", names)
	}
}

func TestWriteFileNoAllocationsIsEmptyArray(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	if err := WriteFile(path, File{}); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":"vpc-cni-ipam/1","allocations":[]}` + "\n"; string(data) != want {
		t.Fatalf("wrote %q, want %q", data, want)
	}
}

func TestWriteFileReplacesExisting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ipam.json")
	if err := WriteFile(path, referenceContent); err != nil {
		t.Fatal(err)
	}
	next := File{Version: Version, Allocations: referenceContent.Allocations[:1]}
	if err := WriteFile(path, next); err != nil {
		t.Fatalf("second WriteFile: %v", err)
	}
	got, err := Read(path)
	if err != nil || !reflect.DeepEqual(*got, next) {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, next)
	}
	if names := dirEntries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only ipam.json", names)
	}
}

// A checkpoint ipamd cannot read back fails its next start, so WriteFile
// refuses to produce one, and leaves the current file alone.
func TestWriteFileRefusesWhatReadWouldReject(t *testing.T) {
	dup := referenceContent.Allocations[0]
	dup.ContainerID = "other"
	for _, tt := range []struct {
		name string
		f    File
		want string
	}{
		{"other version", File{Version: "vpc-cni-ipam/2"}, `version "vpc-cni-ipam/2" is not vpc-cni-ipam/1`},
		{"duplicate address", File{Allocations: []Allocation{referenceContent.Allocations[0], dup}}, "allocations[1]: address 10.0.1.15 is also allocations[0]'s"},
		{"no address", File{Allocations: []Allocation{{NetworkName: "n", ContainerID: "c", IfName: "eth0"}}}, "allocations[0]: neither ipv4 nor ipv6 is set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ipam.json")
			if err := WriteFile(path, referenceContent); err != nil {
				t.Fatal(err)
			}
			err := WriteFile(path, tt.f)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("WriteFile error = %v, want one naming %s and containing %q", err, path, tt.want)
			}
			if got, err := Read(path); err != nil || !reflect.DeepEqual(*got, referenceContent) {
				t.Fatalf("old checkpoint changed: %+v, %v", got, err)
			}
			if names := dirEntries(t, dir); len(names) != 1 {
				t.Errorf("directory holds %v, want only ipam.json", names)
			}
		})
	}
}

// The rename is the commit point: if it fails the old checkpoint must be
// whole and the temporary file gone.
func TestWriteFileRenameFailureKeepsOldCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ipam.json")
	if err := WriteFile(path, referenceContent); err != nil {
		t.Fatal(err)
	}
	renameErr := errors.New("injected rename failure")
	var renamedFrom string
	renameFile = func(from, to string) error {
		renamedFrom = from
		// The new content must be complete before the commit point.
		if _, err := Read(from); err != nil {
			t.Errorf("temporary file is not a complete checkpoint at rename: %v", err)
		}
		return renameErr
	}
	t.Cleanup(func() { renameFile = os.Rename })

	err := WriteFile(path, File{Allocations: referenceContent.Allocations[:1]})
	if !errors.Is(err, renameErr) || !strings.Contains(err.Error(), path) {
		t.Fatalf("WriteFile error = %v, want the rename error naming %s", err, path)
	}
	if filepath.Dir(renamedFrom) != dir {
		t.Errorf("temporary file %s is not in the checkpoint's directory %s", renamedFrom, dir)
	}
	if got, err := Read(path); err != nil || !reflect.DeepEqual(*got, referenceContent) {
		t.Fatalf("old checkpoint changed: %+v, %v", got, err)
	}
	if names := dirEntries(t, dir); !reflect.DeepEqual(names, []string{"ipam.json"}) {
		t.Errorf("directory holds %v, want only ipam.json (temporary file removed)", names)
	}
}

func TestWriteFileOverDirectoryFailsAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ipam.json")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	// Non-empty, so no platform lets a rename replace it.
	if err := os.WriteFile(filepath.Join(path, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(path, referenceContent)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("WriteFile over a directory = %v, want an error naming %s", err, path)
	}
	if names := dirEntries(t, dir); !reflect.DeepEqual(names, []string{"ipam.json"}) {
		t.Errorf("directory holds %v, want only ipam.json (temporary file removed)", names)
	}
	if _, err := os.Stat(filepath.Join(path, "keep")); err != nil {
		t.Errorf("the directory's content was touched: %v", err)
	}
}

func TestWriteFileUncreatableDirectory(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(parent, "aws-node", "ipam.json")
	if err := WriteFile(path, referenceContent); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("WriteFile under a regular file = %v, want an error naming %s", err, path)
	}
}
