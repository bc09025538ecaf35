package testns

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

func TestNewIsolatedAndRemoved(t *testing.T) {
	Require(t)
	ns, err := New("vpccni-t")
	if err != nil {
		t.Fatal(err)
	}
	if err := RefuseInitial(ns.Path()); err != nil {
		t.Fatal(err)
	}
	var inside netns.NsHandle
	if err := ns.Do(func() error { var err error; inside, err = netns.Get(); return err }); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	target, _ := netns.GetFromPath(ns.Path())
	defer target.Close()
	if !inside.Equal(target) {
		t.Fatal("Do did not run inside the namespace")
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path()); !os.IsNotExist(err) {
		t.Fatalf("namespace file left behind: %v", err)
	}
}

func TestRefuseInitial(t *testing.T) {
	Require(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := RefuseInitial("/proc/thread-self/ns/net"); err == nil {
		t.Fatal("the initial namespace was accepted")
	}
}

func TestVlanProbe(t *testing.T) {
	Require(t)
	ok, reason := VlanSupported()
	t.Logf("VLAN links supported: %v %s", ok, reason)
	if !ok && reason == "" {
		t.Fatal("no reason given")
	}
}
