// Package testns makes network namespaces for real-kernel tests, and
// refuses to let a test mutate the machine's own namespace.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named namespaces are bind-mounted (as `ip netns` does).
const Dir = "/var/run/netns"

// NS is a named, persistent network namespace.
type NS struct {
	name string
	path string
}

// Name is the namespace's name (as `ip netns list` shows it).
func (n *NS) Name() string { return n.name }

// Path is the namespace file (for CNI_NETNS).
func (n *NS) Path() string { return n.path }

// Available reports why real-kernel tests cannot run here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("real-kernel tests need root (network namespaces, veth, rules)")
	}
	ns, err := New("vpccni-probe")
	if err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	return ns.Close()
}

// Require skips the test when Available fails — or, under CI=true, fails
// it: a suite that could not run must not count as passing.
func Require(tb testing.TB) {
	tb.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%v (CI=true: this is a failure, not a skip)", err)
		}
		tb.Skip(err)
	}
}

// New creates a namespace named prefix-<random>, bind-mounted under Dir,
// without changing the calling goroutine's namespace.
func New(prefix string) (*NS, error) {
	b := make([]byte, 4)
	rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(Dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()
	err = onThread(func() error { return unix.Unshare(unix.CLONE_NEWNET) }, func() error {
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s: %w", self, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	ns := &NS{name: name, path: path}
	if err := RefuseInitial(path); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// startNS is the inode of the namespace this process started in: the
// machine's own when a test runs normally. PID 1's namespace file is not
// always readable (here it is not), so both are guarded.
var startNS = func() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), &st); err != nil {
		return 0
	}
	return st.Ino
}()

// RefuseInitial returns an error when path is the machine's initial
// network namespace (PID 1's, where readable) or the one this process
// started in: helpers that mutate a kernel call it before touching
// anything.
func RefuseInitial(path string) error {
	var a, b syscall.Stat_t
	if err := syscall.Stat(path, &a); err != nil {
		return err
	}
	if startNS == 0 {
		return errors.New("cannot tell this process's own network namespace: refusing to touch any")
	}
	if a.Ino == startNS {
		return fmt.Errorf("%s is the network namespace this process started in (the machine's): refusing to touch it", path)
	}
	if err := syscall.Stat("/proc/1/ns/net", &b); err == nil && a.Dev == b.Dev && a.Ino == b.Ino {
		return fmt.Errorf("%s is the machine's initial network namespace: refusing to touch it", path)
	}
	return nil
}

// Do runs fn on a thread inside the namespace. A process fn starts
// inherits the namespace (the fork happens on this thread).
func (n *NS) Do(fn func() error) error {
	if err := RefuseInitial(n.path); err != nil {
		return err
	}
	target, err := netns.GetFromPath(n.path)
	if err != nil {
		return err
	}
	defer target.Close()
	return onThread(func() error { return netns.Set(target) }, fn)
}

// onThread runs fn on a locked thread after enter has moved it into
// another namespace, then puts the thread back where it was before
// unlocking it, so no goroutine ever runs in a namespace it did not ask
// for. A thread that cannot go back stays locked and the runtime discards
// it.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			errc <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the original namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Close unmounts and removes the namespace; the kernel frees it (and the
// links in it) when nothing holds it any more.
func (n *NS) Close() error {
	err := unix.Unmount(n.path, unix.MNT_DETACH)
	if rerr := os.Remove(n.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// VlanSupported tries to make an 802.1Q link in a scratch namespace and
// says why it could not.
func VlanSupported() (bool, string) {
	ns, err := New("vpccni-vlanprobe")
	if err != nil {
		return false, "cannot create a scratch namespace: " + err.Error()
	}
	defer ns.Close()
	var reason string
	err = ns.Do(func() error { return probeVlan(&reason) })
	if err != nil {
		return false, err.Error()
	}
	return reason == "", reason
}
