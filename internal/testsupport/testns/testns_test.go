package testns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// fakeTB records what Require would do to a test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

// TestGate: without root or namespaces the test fails, with the reason,
// whatever CI says; never a skip.
func TestGate(t *testing.T) {
	var f fakeTB
	gate(&f, nil)
	if f.failed != "" {
		t.Errorf("no error, yet failed: %q", f.failed)
	}
	gate(&f, errors.New("not root"))
	if !strings.Contains(f.failed, "not root") {
		t.Errorf("failure without the reason: %q", f.failed)
	}
}

func TestNewIsolatedAndRemoved(t *testing.T) {
	Require(t)
	ns, err := New("vpccni-t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if !strings.HasPrefix(ns.Name(), "vpccni-t-") || ns.Path() != filepath.Join(Dir, ns.Name()) {
		t.Fatalf("name %q path %q", ns.Name(), ns.Path())
	}
	if err := RefuseInitial(ns.Path()); err != nil {
		t.Fatal(err)
	}
	var inside netns.NsHandle
	if err := ns.Do(func() error { var err error; inside, err = netns.Get(); return err }); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	target, err := netns.GetFromPath(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if !inside.Equal(target) {
		t.Fatal("Do did not run inside the namespace")
	}
	// The caller's thread is where it was.
	runtime.LockOSThread()
	here, _ := netns.Get()
	runtime.UnlockOSThread()
	defer here.Close()
	if here.Equal(target) {
		t.Fatal("the calling thread was left in the namespace")
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(ns.Path()); !os.IsNotExist(err) {
		t.Fatalf("namespace file left behind: %v", err)
	}
}

func TestTempIsRemoved(t *testing.T) {
	Require(t)
	var path string
	t.Run("inner", func(t *testing.T) { path = Temp(t, "vpccni-temp").Path() })
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("Temp's namespace outlived its test: %v", err)
	}
}

func TestRefuseInitial(t *testing.T) {
	Require(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := RefuseInitial("/proc/thread-self/ns/net"); err == nil {
		t.Fatal("the initial namespace was accepted")
	}
	// PID 1's namespace is the initial one by definition, where readable.
	if _, err := os.Stat("/proc/1/ns/net"); err == nil {
		if err := RefuseInitial("/proc/1/ns/net"); err == nil {
			t.Fatal("PID 1's namespace was accepted")
		}
	}
}

// TestVlanProbe: on this machine's kernel 802.1Q is absent, and the probe
// must say so with a reason; elsewhere it may succeed.
func TestVlanProbe(t *testing.T) {
	Require(t)
	ok, reason := VlanSupported()
	t.Logf("VLAN links supported: %v %s", ok, reason)
	if !ok && reason == "" {
		t.Fatal("no reason given")
	}
}
