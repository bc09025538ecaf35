package ipamd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointWriteFailureKeepsRelease: a DEL whose release cannot be
// written keeps the address held (the plugin is told to retry), so the
// retried DEL finds the pod again instead of "unknown pod". Without the
// undo the address would be free in memory but held on disk, and the
// retry would return success without a teardown.
func TestCheckpointWriteFailureKeepsRelease(t *testing.T) {
	sock, path := sockPath(t), ckptPath(t)
	d := start(t, sock, Config{Checkpoint: path})
	c := client(t, sock)
	rep, err := c.AddNetwork(ctx(t), addReq("c1"))
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	dir := filepath.Dir(path)
	restore := func() {}
	if os.Geteuid() == 0 {
		// root ignores the mode: make the rename fail instead.
		saved, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(path)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		restore = func() {
			os.RemoveAll(path)
			os.WriteFile(path, saved, 0o600)
		}
	} else {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		restore = func() { os.Chmod(dir, 0o755) }
	}
	del, err := c.DelNetwork(ctx(t), delReq("c1"))
	if err == nil && del.GetSuccess() {
		restore()
		t.Fatalf("DEL with an unwritable checkpoint succeeded: %v", del)
	}
	if got := d.Allocations(); len(got) != 1 || got[0].Key.ContainerID != "c1" {
		restore()
		t.Fatalf("an unpersisted release was not undone: allocations %+v", got)
	}
	restore()
	del, err = c.DelNetwork(ctx(t), delReq("c1"))
	if err != nil || !del.GetSuccess() || len(del.GetIPAllocationMetadata()) != 1 ||
		del.GetIPAllocationMetadata()[0].GetIPv4Addr() != rep.GetIPAllocationMetadata()[0].GetIPv4Addr() {
		t.Fatalf("retried DEL: %v %v", del, err)
	}
	if n := len(d.Allocations()); n != 0 {
		t.Fatalf("allocations after the retried DEL: %d", n)
	}
}
