// Package recorddir is a directory of small JSON records, one file each,
// as the release queue (package releasequeue) and the attachment records
// (plugin/attachrec) keep them: written whole (temporary file, rename;
// with Sync, an fsync of the file before the rename and of the directory
// after it), mode 0600 in a 0700 directory, so a crash of the writer
// leaves the old record or the new one, never half of one; read
// strictly (no symbolic link followed, no FIFO waited on, a size limit,
// no unknown field, nothing after the record), since anything local can
// plant a file there.
package recorddir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Dir is a records directory. What a record means, and its validation,
// is the caller's.
type Dir struct {
	Path string
	// MaxBytes bounds one file: a bigger one is not a record the caller
	// wrote.
	MaxBytes int
	// Sync makes a write survive the machine's crash too, not only the
	// writer's (a written file is in the page cache, and every later
	// reader sees it, whatever happens to the process that wrote it):
	// about a millisecond of fsyncs per write on a disk. A caller whose
	// records mean nothing after a reboot leaves it off.
	Sync bool
}

// CheckName refuses what is not a record file name: a record is
// "<something>.json" directly in the directory, and not hidden.
func CheckName(name string) error {
	if filepath.Base(name) != name || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("%q is not a record name", name)
	}
	return nil
}

// Write stores v as the record name, whole, replacing an earlier one.
func (d Dir) Write(name string, v any) error {
	if err := CheckName(name); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > d.MaxBytes {
		return fmt.Errorf("record %s: %d bytes, over %d", name, len(b), d.MaxBytes)
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.Path, ".tmp-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: not found
	_, werr := tmp.Write(b)
	var serr error
	if d.Sync {
		serr = tmp.Sync()
	}
	if err := errors.Join(werr, serr, tmp.Close()); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(d.Path, name)); err != nil {
		return err
	}
	if !d.Sync {
		return nil
	}
	dir, err := os.Open(d.Path)
	if err != nil {
		return err
	}
	return errors.Join(dir.Sync(), dir.Close())
}

// Read decodes the record name into v. A missing record is an error that
// errors.Is os.ErrNotExist; anything else that fails says why the file is
// not a record.
func (d Dir) Read(name string, v any) error {
	if err := CheckName(name); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(d.Path, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return errors.New("a symbolic link")
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(d.MaxBytes)+1))
	if err != nil {
		return err
	}
	if len(b) > d.MaxBytes {
		return fmt.Errorf("over %d bytes", d.MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the record")
	}
	return nil
}

// Names are the record files (regular, *.json, not hidden), in name
// order. A missing directory holds none.
func (d Dir) Names() ([]string, error) {
	des, err := os.ReadDir(d.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if de.Type().IsRegular() && CheckName(de.Name()) == nil {
			out = append(out, de.Name())
		}
	}
	return out, nil
}

// Remove deletes the record name, if it is there.
func (d Dir) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(d.Path, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// SetAside renames a bad record to name.bad: never read again, neither
// listed nor counted, kept for an operator.
func (d Dir) SetAside(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return os.Rename(filepath.Join(d.Path, name), filepath.Join(d.Path, name+".bad"))
}
