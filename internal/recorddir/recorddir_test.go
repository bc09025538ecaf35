package recorddir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

type rec struct {
	A string `json:"a"`
}

func TestWriteReadRemove(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "records"), MaxBytes: 64}
	if err := d.Write("x.json", rec{A: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Write("x.json", rec{A: "2"}); err != nil {
		t.Fatal(err)
	}
	var r rec
	if err := d.Read("x.json", &r); err != nil || r.A != "2" {
		t.Fatalf("read %+v %v", r, err)
	}
	fi, _ := os.Stat(filepath.Join(d.Path, "x.json"))
	di, _ := os.Stat(d.Path)
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("modes %v %v, want 0600 in 0700", fi.Mode(), di.Mode())
	}
	if names, err := d.Names(); err != nil || len(names) != 1 {
		t.Errorf("names %v %v (no temporary file may be left)", names, err)
	}
	if err := d.Remove("x.json"); err != nil {
		t.Fatal(err)
	}
	if err := d.Read("x.json", &r); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read after remove: %v", err)
	}
	if err := d.Remove("x.json"); err != nil {
		t.Errorf("a second remove: %v", err)
	}
}

// Anything local can plant a file: what is not a record the caller wrote
// is an error, never a hang, a followed link or a half-read value.
func TestReadIsStrict(t *testing.T) {
	d := Dir{Path: t.TempDir(), MaxBytes: 32}
	write := func(n, s string) {
		if err := os.WriteFile(filepath.Join(d.Path, n), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("unknown.json", `{"a":"1","b":2}`)
	write("trailing.json", `{"a":"1"}{"a":"2"}`)
	write("big.json", `{"a":"0123456789012345678901234567890123456789"}`)
	write("target.json", `{"a":"1"}`)
	if err := os.Symlink(filepath.Join(d.Path, "target.json"), filepath.Join(d.Path, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(d.Path, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"unknown.json", "trailing.json", "big.json", "link.json", "fifo.json"} {
		var r rec
		if err := d.Read(n, &r); err == nil {
			t.Errorf("%s read as a record: %+v", n, r)
		}
	}
	names, _ := d.Names()
	for _, n := range names {
		if n == "link.json" || n == "fifo.json" {
			t.Errorf("Names lists %s, not a regular file", n)
		}
	}
	if err := d.Write("big.json", rec{A: "0123456789012345678901234567890123456789"}); err == nil {
		t.Error("an oversize record was written")
	}
	for _, n := range []string{"../x.json", ".hidden.json", "x.txt"} {
		if d.Write(n, rec{}) == nil || d.Remove(n) == nil || d.SetAside(n) == nil {
			t.Errorf("%q accepted as a record name", n)
		}
	}
}
