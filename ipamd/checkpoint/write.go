package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// renameFile is os.Rename; tests replace it to make the last step of a
// write fail after the new content is already on disk.
var renameFile = os.Rename

// WriteFile replaces the checkpoint at path with f, atomically and durably:
// a reader (or ipamd after a crash or power loss) sees either the old file
// or the new one, never a mix or a truncated file. The new content goes to
// a temporary file in the same directory (so the rename cannot cross file
// systems), is fsynced, renamed over path, and the directory is fsynced so
// the rename itself survives a power loss. The directory is created (0755)
// if missing. On any error before the rename the temporary file is removed
// and the old checkpoint is left as it was.
//
// An empty f.Version is written as Version; any other version, or
// allocations that Read would reject, is refused: a checkpoint that fails
// to read makes ipamd's next start fail.
func WriteFile(path string, f File) error {
	switch f.Version {
	case "":
		f.Version = Version
	case Version:
	default:
		return fmt.Errorf("write checkpoint %s: version %q is not %s", path, f.Version, Version)
	}
	if err := validateAllocations(f.Allocations); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	if f.Allocations == nil {
		// "[]" rather than "null": the same meaning to us and to the
		// reference, and friendlier to anything else reading the file.
		f.Allocations = []Allocation{}
	}

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	if err := writeTemp(tmp, f); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint %s: temporary file %s: %w", path, tmp.Name(), err)
	}
	if err := renameFile(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// The new file is in place but may not survive a power loss.
		return fmt.Errorf("write checkpoint %s: renamed, but the directory was not synced: %w", path, err)
	}
	return nil
}

// writeTemp fills and closes the temporary file; its content is on stable
// storage when it returns nil.
func writeTemp(tmp *os.File, f File) error {
	// CreateTemp already makes it 0600; set it anyway so the mode does not
	// depend on that detail (the file names every pod on the node).
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	// The encoder marshals the whole value before its single Write, so a
	// marshal error leaves the file empty rather than half written.
	if err := json.NewEncoder(tmp).Encode(f); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return tmp.Close()
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	syncErr := d.Sync()
	return errors.Join(syncErr, d.Close())
}
