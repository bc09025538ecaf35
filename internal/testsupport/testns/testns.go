// Package testns makes network namespaces for real-kernel tests, and
// refuses to let a test mutate the machine's own namespace.
//
// Every namespace is named (bind-mounted under Dir, so `ip netns list`
// shows it while it lives) and removed by Close; tests register Close with
// t.Cleanup (Temp does), so nothing is left behind, pass or fail.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/vpccni/vpccni/kernel/linux/nsthread"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named namespaces are bind-mounted (as `ip netns` does).
const Dir = "/var/run/netns"

// NS is a named, persistent network namespace.
type NS struct {
	name, path string
	mu         sync.Mutex
	closed     bool
}

// Name is the namespace's name (as `ip netns list` shows it).
func (n *NS) Name() string { return n.name }

// Path is the namespace file (for CNI_NETNS, or kernel/linux.Opener).
func (n *NS) Path() string { return n.path }

var (
	probeOnce sync.Once
	probeErr  error
)

// RequireRoot reports why real-kernel tests cannot run here (not root, or
// a network namespace cannot be created and removed), or nil. The answer
// is worked out once per process.
func RequireRoot() error {
	probeOnce.Do(func() {
		if os.Geteuid() != 0 {
			probeErr = errors.New("real-kernel tests need root (network namespaces, veth, rules)")
			return
		}
		ns, err := New("vpccni-probe")
		if err != nil {
			probeErr = fmt.Errorf("cannot create a network namespace: %w", err)
			return
		}
		if err := ns.Close(); err != nil {
			probeErr = fmt.Errorf("cannot remove a network namespace: %w", err)
		}
	})
	return probeErr
}

// TB is what Require needs of a test: *testing.T and *testing.B have it,
// and so does ginkgo's GinkgoT().
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Require fails the test when RequireRoot fails, with the reason: a
// real-kernel test that could not run must never count as passing, nor
// hide as a skip.
func Require(tb TB) {
	tb.Helper()
	gate(tb, RequireRoot())
}

func gate(tb TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%v: run the real-kernel tests as root (make test)", err)
	}
}

// CleanupTB is a TB that can register cleanups (testing.TB, GinkgoT()).
type CleanupTB interface {
	TB
	Cleanup(func())
}

// Temp is Require, then New, with Close registered as a cleanup: the
// namespace is gone when the test ends, whatever its outcome.
func Temp(tb CleanupTB, prefix string) *NS {
	tb.Helper()
	Require(tb)
	ns, err := New(prefix)
	if err != nil {
		tb.Fatalf("new namespace: %v", err)
	}
	tb.Cleanup(func() { ns.Close() })
	return ns
}

// New creates a namespace named prefix-<random>, bind-mounted under Dir,
// without changing the calling goroutine's namespace (it is made on a
// thread of its own). It checks that what it made is not the machine's
// namespace before returning it.
func New(prefix string) (*NS, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
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
	err = nsthread.Run(func() error { return unix.Unshare(unix.CLONE_NEWNET) }, func() error {
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

// startNS is the namespace this process started in: the machine's own
// when a test runs normally.
var startNS = func() *syscall.Stat_t {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), &st); err != nil {
		return nil
	}
	return &st
}()

// RefuseInitial returns an error when path is the machine's initial
// network namespace (PID 1's, compared by device and inode) or the one
// this process started in, which is the machine's when tests run
// normally; PID 1's namespace file is not readable everywhere (inside
// some sandboxes it is not), so both are checked. Helpers that mutate a
// kernel call it before touching anything.
func RefuseInitial(path string) error {
	var a, b syscall.Stat_t
	if err := syscall.Stat(path, &a); err != nil {
		return err
	}
	if startNS == nil {
		return errors.New("cannot tell this process's own network namespace: refusing to touch any")
	}
	if a.Dev == startNS.Dev && a.Ino == startNS.Ino {
		return fmt.Errorf("%s is the network namespace this process started in (the machine's): refusing to touch it", path)
	}
	if err := syscall.Stat("/proc/1/ns/net", &b); err == nil && a.Dev == b.Dev && a.Ino == b.Ino {
		return fmt.Errorf("%s is the machine's initial network namespace: refusing to touch it", path)
	}
	return nil
}

// Do runs fn on a thread inside the namespace. A process fn starts
// inherits the namespace (the fork happens on that thread).
func (n *NS) Do(fn func() error) error {
	if err := RefuseInitial(n.path); err != nil {
		return err
	}
	target, err := netns.GetFromPath(n.path)
	if err != nil {
		return err
	}
	defer target.Close()
	return nsthread.Run(func() error { return netns.Set(target) }, fn)
}

// Close unmounts and removes the namespace; the kernel frees it, with the
// links in it (and their veth peers elsewhere), once nothing holds it any
// more. A second Close does nothing.
func (n *NS) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
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
	if err := ns.Do(func() error { return probeVlan(&reason) }); err != nil {
		return false, err.Error()
	}
	return reason == "", reason
}
