package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// InstallFile puts src at dst with mode, atomically: a copy next to dst
// under a temporary name, synced, then renamed over dst. A runtime that
// executes the plugin or reads the conflist at that moment sees the old
// file or the new one, never half of one, and a running plugin binary is
// never written over (its inode is replaced, not changed).
func InstallFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeAtomic(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// WriteFile is InstallFile for bytes.
func WriteFile(dst string, data []byte, mode os.FileMode) error {
	return writeAtomic(dst, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

func writeAtomic(dst string, mode os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(dst)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (is its hostPath volume mounted?)", dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".vpccni-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	done = true
	return nil
}

// InstallBinaries installs every regular executable file of srcDir into
// dstDir but those in skip, in name order, and returns their names. As
// the reference's init container does, a binary of the same name on the
// node is replaced: the plugins chained in the conflist must be the ones
// this image was tested with.
func InstallBinaries(srcDir, dstDir string, skip map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		if skip[e.Name()] || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s holds no executable to install", srcDir)
	}
	var errs []error
	for _, n := range names {
		if err := InstallFile(filepath.Join(srcDir, n), filepath.Join(dstDir, n), 0o755); err != nil {
			errs = append(errs, fmt.Errorf("install %s: %w", n, err))
		}
	}
	return names, errors.Join(errs...)
}
