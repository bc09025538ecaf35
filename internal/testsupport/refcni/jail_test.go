package refcni

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
)

// The jail's mounts never reach the machine: /host and /var/run/aws-node
// inside are the test's directories, /var is the jail's own, and the
// machine's paths stay as they were; a process started from the jail sees
// the same tree.
func TestJailKeepsTheMachineApart(t *testing.T) {
	testns.Require(t)
	_, hostBefore := os.Lstat("/host")
	_, libBefore := os.Lstat("/var/lib/refcni-probe")
	sockDir := t.TempDir()
	j, err := NewJail(sockDir)
	if err != nil {
		t.Fatal(err)
	}
	root := j.root
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Lstat(root); !os.IsNotExist(err) {
			t.Errorf("the jail's root %s is left behind (%v)", root, err)
		}
		if _, err := os.Lstat(j.hostDir); !os.IsNotExist(err) {
			t.Errorf("the jail's /host %s is left behind (%v)", j.hostDir, err)
		}
	}()
	script := "mkdir -p " + LogDir + " /var/lib/refcni-probe && echo log > " + LogDir + "/ipamd.log && " +
		"echo sock > " + SocketDir + "/probe && cat /proc/self/mountinfo && touch /etc/refcni-probe"
	var out []byte
	err = j.Run(func() error {
		out, err = exec.Command("/bin/sh", "-c", script).CombinedOutput()
		return err
	})
	if err == nil || !strings.Contains(string(out), "Read-only file system") {
		t.Errorf("touch /etc inside the jail: want a read-only error, got %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(j.HostDir(), "var/log/aws-routed-eni/ipamd.log")); err != nil || string(b) != "log\n" {
		t.Errorf("the log written inside is not in HostDir: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(sockDir, "probe")); err != nil || string(b) != "sock\n" {
		t.Errorf("%s inside is not the socket dir: %q %v", SocketDir, b, err)
	}
	if _, err := os.Lstat("/host"); (err == nil) != (hostBefore == nil) {
		t.Errorf("the machine's /host changed: before %v, now %v", hostBefore, err)
	}
	if _, err := os.Lstat("/var/lib/refcni-probe"); (err == nil) != (libBefore == nil) {
		t.Errorf("the machine's /var/lib changed: before %v, now %v", libBefore, err)
	}
	if _, err := os.Lstat("/etc/refcni-probe"); err == nil {
		os.Remove("/etc/refcni-probe")
		t.Errorf("the jail wrote the machine's /etc")
	}
	mine, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mine), root) {
		t.Errorf("the machine's mount table shows the jail's root %s", root)
	}

	// A namespace made after the jail is reachable once exposed.
	ns := testns.Temp(t, "refcni-pod")
	probe := func() error {
		return j.Run(func() error { _, err := os.Stat(ns.Path()); return err })
	}
	if probe() == nil {
		t.Errorf("%s is inside the jail before ExposeNetns", ns.Path())
	}
	if err := j.ExposeNetns(ns.Path()); err != nil {
		t.Fatal(err)
	}
	if err := j.Do(ns.Path(), func() error { return nil }); err != nil {
		t.Errorf("Do in the exposed namespace: %v", err)
	}
}

// NewJail("") makes /var/run/aws-node a tmpfs only the jail sees: what an
// ipamd started there keeps in it never lands on the machine.
func TestJailOwnSocketDir(t *testing.T) {
	testns.Require(t)
	j, err := NewJail("")
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	probe := filepath.Join(SocketDir, "refcni-probe")
	if err := j.Run(func() error { return os.WriteFile(probe, []byte("x"), 0o600) }); err != nil {
		t.Fatalf("write %s inside: %v", probe, err)
	}
	if err := j.Run(func() error { _, err := os.Stat(probe); return err }); err != nil {
		t.Errorf("%s is not there inside: %v", probe, err)
	}
	if _, err := os.Lstat(probe); err == nil {
		os.Remove(probe)
		t.Errorf("%s landed on the machine", probe)
	}
}
