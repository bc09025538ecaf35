package attachrec

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func rec() Record {
	return Record{Version: Version, NetworkName: "aws-cni", ContainerID: "c1", IfName: "eth0", PodNamespace: "default",
		PodName: "web", Netns: "/var/run/netns/cni-1", HostVeth: "eni0123456789a", HostVethIndex: 7,
		IPs: []IP{{Addr: netip.MustParseAddr("10.0.1.5"), Table: 2}}, Device: 1}
}

func TestWriteLoadRemove(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "state", Subdir)}
	if _, err := s.Load("aws-cni", "c1", "eth0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load before Write: %v, want ErrNotFound", err)
	}
	if err := s.Write(rec()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("aws-cni", "c1", "eth0")
	if err != nil || got.HostVethIndex != 7 || got.IPs[0] != rec().IPs[0] {
		t.Fatalf("Load: %+v, %v", got, err)
	}
	fi, _ := os.Stat(filepath.Join(s.Dir, rec().Name()))
	di, _ := os.Stat(s.Dir)
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes: file %v, dir %v", fi.Mode(), di.Mode())
	}
	if _, err := s.Load("aws-cni", "c1", "eth1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another ifName: %v", err)
	}
	if err := s.Remove("aws-cni", "c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("aws-cni", "c1", "eth0"); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := s.Load("aws-cni", "c1", "eth0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load after Remove: %v", err)
	}
	ents, _ := os.ReadDir(s.Dir)
	if len(ents) != 0 {
		t.Fatalf("left in the directory: %v", ents)
	}
}

func TestValidateRefuses(t *testing.T) {
	cases := map[string]func(*Record){
		"version":       func(r *Record) { r.Version = "vpccni-attachment/0" },
		"no container":  func(r *Record) { r.ContainerID = "" },
		"no pod":        func(r *Record) { r.PodName = "" },
		"long veth":     func(r *Record) { r.HostVeth = "eni0123456789abcdef" },
		"no ips":        func(r *Record) { r.IPs = nil },
		"loopback":      func(r *Record) { r.IPs[0].Addr = netip.MustParseAddr("127.0.0.1") },
		"mapped":        func(r *Record) { r.IPs[0].Addr = netip.MustParseAddr("::ffff:10.0.1.5") },
		"local table":   func(r *Record) { r.IPs[0].Table = 255 },
		"table 0":       func(r *Record) { r.IPs[0].Table = 0 },
		"vlan range":    func(r *Record) { r.VlanID, r.Device = 4095, -1 },
		"vlan 155":      func(r *Record) { r.VlanID, r.Device = 155, -1 },
		"vlan table":    func(r *Record) { r.VlanID, r.Device = 7, -1 },
		"strict no vln": func(r *Record) { r.Strict = true },
		"relative ns":   func(r *Record) { r.Netns = "netns/x" },
		"negative idx":  func(r *Record) { r.HostVethIndex = -1 },
	}
	for name, mut := range cases {
		r := rec()
		r.IPs = append([]IP(nil), r.IPs...)
		mut(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, r)
		}
		if err := (Store{Dir: t.TempDir()}).Write(r); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	b := rec()
	b.VlanID, b.Device, b.Strict, b.IPs[0].Table = 7, -1, true, 107
	if err := b.Validate(); err != nil {
		t.Fatalf("a strict branch pod's record refused: %v", err)
	}
}

// Files nobody wrote through Write: each is a *BadRecordError, never a
// record, and a FIFO does not hang the reader.
func TestBadFiles(t *testing.T) {
	good := `{"version":"vpccni-attachment/1","networkName":"aws-cni","containerID":"c1","ifName":"eth0","podNamespace":"default",` +
		`"podName":"web","hostVeth":"eni0123456789a","ips":[{"addr":"10.0.1.5","table":2}],"device":1}`
	cases := map[string]func(path string) error{
		"truncated": func(p string) error { return os.WriteFile(p, []byte(good[:40]), 0o600) },
		"unknown": func(p string) error {
			return os.WriteFile(p, []byte(strings.Replace(good, `"device":1`, `"device":1,"x":1`, 1)), 0o600)
		},
		"trailing": func(p string) error { return os.WriteFile(p, []byte(good+good), 0o600) },
		"oversize": func(p string) error { return os.WriteFile(p, []byte(good+strings.Repeat(" ", maxRecordBytes)), 0o600) },
		"table 255": func(p string) error {
			return os.WriteFile(p, []byte(strings.Replace(good, `"table":2`, `"table":255`, 1)), 0o600)
		},
		"other":     func(p string) error { return os.WriteFile(p, []byte(strings.Replace(good, `"c1"`, `"c2"`, 1)), 0o600) },
		"symlink":   func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
	}
	for name, plant := range cases {
		s := Store{Dir: t.TempDir()}
		path := filepath.Join(s.Dir, Name("aws-cni", "c1", "eth0"))
		if err := plant(path); err != nil {
			t.Fatal(err)
		}
		_, err := s.Load("aws-cni", "c1", "eth0")
		var bad *BadRecordError
		if !errors.As(err, &bad) {
			t.Errorf("%s: Load = %v, want a BadRecordError", name, err)
			continue
		}
		if err := s.SetAside(filepath.Base(bad.Path)); err != nil {
			t.Errorf("%s: SetAside: %v", name, err)
		}
		if _, err := os.Lstat(path + ".bad"); err != nil {
			t.Errorf("%s: not set aside: %v", name, err)
		}
		if _, err := s.Load("aws-cni", "c1", "eth0"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: after SetAside: %v", name, err)
		}
	}
	// The good text itself is a record: the cases fail for their flaw.
	s := Store{Dir: t.TempDir()}
	os.WriteFile(filepath.Join(s.Dir, Name("aws-cni", "c1", "eth0")), []byte(good), 0o600)
	if _, err := s.Load("aws-cni", "c1", "eth0"); err != nil {
		t.Fatalf("the good record: %v", err)
	}
}

func TestList(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if ents, errs := (Store{Dir: filepath.Join(s.Dir, "missing")}).List(); len(ents)+len(errs) != 0 {
		t.Fatalf("missing dir: %v %v", ents, errs)
	}
	a, b := rec(), rec()
	b.ContainerID = "c2"
	for _, r := range []Record{a, b} {
		if err := s.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	// a record under another attachment's name, and junk
	os.WriteFile(filepath.Join(s.Dir, "0000.json"), mustRead(t, filepath.Join(s.Dir, a.Name())), 0o600)
	os.WriteFile(filepath.Join(s.Dir, "junk.json"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(s.Dir, ".tmp-1"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(s.Dir, "x.json.bad"), []byte("{"), 0o600)
	ents, errs := s.List()
	if len(ents) != 2 || len(errs) != 2 {
		t.Fatalf("List: %d records %v, errors %v", len(ents), ents, errs)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
