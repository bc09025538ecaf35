package releasequeue

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func record(containerID string) Record {
	return Record{Version: Version, NetworkName: "aws-cni", ContainerID: containerID, IfName: "eth0",
		PodNamespace: "default", PodName: "web-0", HostVethIndex: 7,
		IPs: []netip.Addr{netip.MustParseAddr("10.0.1.11")}, TornDownAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func TestAppendListRemove(t *testing.T) {
	q := Queue{Dir: filepath.Join(t.TempDir(), "release-queue")}
	if e, errs := q.List(); len(e) != 0 || len(errs) != 0 {
		t.Fatalf("a missing directory is an empty queue: %v %v", e, errs)
	}
	a, b := record("c-a"), record("c-b")
	for _, r := range []Record{a, b, a} { // a retried DEL replaces its record
		if err := q.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	entries, errs := q.List()
	if len(errs) != 0 || len(entries) != 2 {
		t.Fatalf("List: %v, %v; want 2 records", entries, errs)
	}
	for _, e := range entries {
		if e.Record.ContainerID != "c-a" && e.Record.ContainerID != "c-b" || !e.Record.TornDownAt.Equal(a.TornDownAt) {
			t.Errorf("read back %+v", e.Record)
		}
		fi, err := os.Stat(filepath.Join(q.Dir, e.Name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", e.Name, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(q.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, %v; want 0700", fi.Mode(), err)
	}
	if err := q.Remove("aws-cni", "c-a", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove("aws-cni", "c-a", "eth0"); err != nil {
		t.Fatalf("removing a record twice: %v", err)
	}
	if entries, _ = q.List(); len(entries) != 1 || entries[0].Record.ContainerID != "c-b" {
		t.Fatalf("after Remove: %v", entries)
	}
	if tmps, _ := filepath.Glob(filepath.Join(q.Dir, ".tmp-*")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestFullQueueIsAnError(t *testing.T) {
	q := Queue{Dir: t.TempDir(), Max: 2}
	for _, id := range []string{"c-a", "c-b"} {
		if err := q.Append(record(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Append(record("c-c")); !errors.Is(err, ErrFull) {
		t.Fatalf("a third record: %v, want ErrFull", err)
	}
	if err := q.Append(record("c-a")); err != nil {
		t.Fatalf("replacing a record of a full queue: %v", err)
	}
}

func TestBadRecordsAreNamedAndSetAside(t *testing.T) {
	q := Queue{Dir: t.TempDir()}
	if err := q.Append(record("c-good")); err != nil {
		t.Fatal(err)
	}
	good := record("c-good").Name()
	bad := map[string]string{
		"truncated.json":    `{"version":"vpccni-release/1","networkName":"aws-`,
		"no-ips.json":       `{"version":"vpccni-release/1","networkName":"n","containerID":"c","ifName":"eth0","ips":[]}`,
		"other-format.json": `{"version":"v9","networkName":"n","containerID":"c","ifName":"eth0","ips":["10.0.1.5"]}`,
		"unknown.json":      `{"version":"vpccni-release/1","networkName":"n","containerID":"c","ifName":"eth0","ips":["10.0.1.5"],"table":2}`,
		"misnamed.json":     `{"version":"vpccni-release/1","networkName":"n","containerID":"c","ifName":"eth0","ips":["10.0.1.5"]}`,
	}
	for n, s := range bad {
		if err := os.WriteFile(filepath.Join(q.Dir, n), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entries, errs := q.List()
	if len(entries) != 1 || entries[0].Name != good {
		t.Errorf("the good record is still read: %v", entries)
	}
	if len(errs) != len(bad) {
		t.Fatalf("%d errors for %d bad files: %v", len(errs), len(bad), errs)
	}
	for _, err := range errs {
		var be *BadRecordError
		if !errors.As(err, &be) {
			t.Fatalf("%v is not a BadRecordError", err)
		}
		if err := q.SetAside(filepath.Base(be.Path)); err != nil {
			t.Fatal(err)
		}
	}
	if entries, errs = q.List(); len(entries) != 1 || len(errs) != 0 {
		t.Errorf("after SetAside: %v %v", entries, errs)
	}
	if err := q.RemoveFile("../etc/passwd"); err == nil {
		t.Error("RemoveFile accepted a path")
	}
}

func TestAppendRefusesAnInvalidRecord(t *testing.T) {
	q := Queue{Dir: t.TempDir()}
	r := record("c-a")
	r.IPs = nil
	if err := q.Append(r); err == nil {
		t.Fatal("a record without addresses was written")
	}
	if entries, _ := q.List(); len(entries) != 0 {
		t.Fatalf("queue: %v", entries)
	}
}
