// Package refcni runs the reference AWS VPC CNI plugin (aws-cni, built
// from the Go module proxy by `make tools`) the way a runtime runs it,
// without letting it touch the machine: the reference dials ipamd on a
// constant socket path (/var/run/aws-node/ipamd.sock) and writes its log
// under /host/var/log/aws-routed-eni whatever its netconf says, so it runs
// on a thread whose mount namespace is private and whose root is a tmpfs
// holding only what a plugin needs. The interop suite and the benchmark
// drive it, and vpc-cni and ptp beside it, through that thread.
//
// It is test support: nothing shipped imports it.
package refcni

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The paths the reference plugin insists on.
const (
	// SocketDir holds the ipamd socket the reference dials
	// (SocketDir/ipamd.sock).
	SocketDir = "/var/run/aws-node"
	// LogDir is where the reference's default logger writes ipamd.log.
	LogDir = "/host/var/log/aws-routed-eni"
)

// Jail is one locked OS thread with a private mount namespace and a tmpfs
// root. Inside it the machine's /proc, /sys, /dev and /tmp are bound at
// their own paths, SocketDir is bound to a directory of the caller's (where
// ipamd listens) or is a tmpfs of its own, as /var/run is on a node, and
// /host is a temporary directory (the reference's log lands there). A process started from the thread (a CNI plugin exec'd by
// libcni) sees that tree; the machine never sees any of its mounts, and
// they all go when the thread ends (Close).
type Jail struct {
	root    string // the tmpfs root, as a directory of the machine's /tmp
	hostDir string // what /host is inside
	jobs    chan job
	done    chan struct{}
	mu      sync.Mutex
	exposed map[string]bool
	closed  bool
}

type job struct {
	fn  func() error
	err chan error
}

// The machine paths bound at the same path inside (recursively: /dev/pts,
// /sys/fs/cgroup and the like come along), writable...
var sameBinds = []string{"/proc", "/sys", "/dev", "/tmp"}

// ...and read-only: what a dynamically linked plugin needs to start (a
// symlink, as on a merged-/usr system, is made again inside). Nothing
// else of the machine's / is there: /var and /host inside are the
// tmpfs's, so a plugin writing under /var/lib or /host leaves nothing on
// the machine.
var readOnlyBinds = []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64"}

// NewJail starts the thread. socketDir is bound at SocketDir inside; ""
// makes SocketDir a tmpfs seen only inside (an ipamd started from the
// jail keeps its socket, checkpoint and release queue there, as aws-node
// does in a node's /var/run).
func NewJail(socketDir string) (*Jail, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("refcni: the jail needs root (mount namespaces)")
	}
	root, err := os.MkdirTemp("", "refcni-root-")
	if err != nil {
		return nil, err
	}
	hostDir, err := os.MkdirTemp("", "refcni-host-")
	if err != nil {
		os.Remove(root)
		return nil, err
	}
	j := &Jail{root: root, hostDir: hostDir, jobs: make(chan job), done: make(chan struct{}), exposed: map[string]bool{}}
	ready := make(chan error, 1)
	go offMainThread(func() { j.loop(socketDir, ready) })
	if err := <-ready; err != nil {
		<-j.done
		os.Remove(root)
		os.RemoveAll(hostDir)
		return nil, err
	}
	return j, nil
}

// HostDir is the directory bound at /host inside: the reference's log is
// at HostDir()/var/log/aws-routed-eni/ipamd.log.
func (j *Jail) HostDir() string { return j.hostDir }

// offMainThread runs fn on a goroutine locked to a thread that is not the
// process's main one. The runtime never ends the main thread: a goroutine
// that exits locked to it leaves it wedged, and a jail there would leave
// its namespace for the life of the process and be what /proc/self shows.
// Holding the main thread while fn's goroutine locks its own keeps fn off
// it.
func offMainThread(fn func()) {
	runtime.LockOSThread()
	if unix.Gettid() != os.Getpid() {
		fn()
		return
	}
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		fn()
	}()
	<-locked
	runtime.UnlockOSThread()
}

// loop is the jail's thread. It never unlocks: when it returns, the
// runtime ends the thread, and with it the mount namespace.
func (j *Jail) loop(socketDir string, ready chan<- error) {
	defer close(j.done)
	if err := j.enter(socketDir); err != nil {
		ready <- fmt.Errorf("refcni: build the jail: %w", err)
		return
	}
	ready <- nil
	orig, err := netns.Get()
	if err != nil {
		// Nothing can run: answer every job with the error.
		for jb := range j.jobs {
			jb.err <- err
		}
		return
	}
	defer orig.Close()
	for jb := range j.jobs {
		err := jb.fn()
		// fn may have moved the thread into another network namespace
		// (Do does): put it back before the next job.
		if serr := netns.Set(orig); serr != nil {
			jb.err <- errors.Join(err, serr)
			for jb := range j.jobs {
				jb.err <- fmt.Errorf("refcni: the jail thread is lost: %w", serr)
			}
			return
		}
		jb.err <- err
	}
}

// enter makes the thread's private mount namespace and root. Every mount
// here happens after the unshare and with propagation private, so none of
// it reaches the machine's mount table.
func (j *Jail) enter(socketDir string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("tmpfs", j.root, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs at %s: %w", j.root, err)
	}
	for _, p := range sameBinds {
		if err := j.bind(p, p, true); err != nil {
			return err
		}
	}
	for _, p := range readOnlyBinds {
		fi, err := os.Lstat(p)
		switch {
		case os.IsNotExist(err):
			continue
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(to, filepath.Join(j.root, p)); err != nil {
				return err
			}
			continue
		}
		if err := j.bind(p, p, true); err != nil {
			return err
		}
		if err := unix.Mount("", filepath.Join(j.root, p), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	if socketDir == "" {
		target := filepath.Join(j.root, SocketDir)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", target, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs at %s: %w", SocketDir, err)
		}
	} else if err := j.bind(socketDir, SocketDir, false); err != nil {
		return err
	}
	if err := j.bind(j.hostDir, "/host", false); err != nil {
		return err
	}
	if err := unix.Chroot(j.root); err != nil {
		return fmt.Errorf("chroot %s: %w", j.root, err)
	}
	return unix.Chdir("/")
}

// bind mounts the machine's src at dst inside the root (before chroot).
func (j *Jail) bind(src, dst string, recursive bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	target := filepath.Join(j.root, dst)
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else {
		if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o444); err == nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND)
	if recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, target, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	return nil
}

// Run runs fn on the jail's thread (in the machine's network namespace,
// inside the jail's mounts and root).
func (j *Jail) Run(fn func() error) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return errors.New("refcni: the jail is closed")
	}
	j.mu.Unlock()
	jb := job{fn: fn, err: make(chan error, 1)}
	select {
	case j.jobs <- jb:
	case <-j.done:
		return errors.New("refcni: the jail thread has ended")
	}
	return <-jb.err
}

// Do runs fn on the jail's thread inside the network namespace at nsPath
// (a node namespace): a plugin fn starts runs there, as a runtime on that
// node would run it. The namespace is opened here, outside the jail, so
// nsPath need not be exposed.
func (j *Jail) Do(nsPath string, fn func() error) error {
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return err
	}
	defer target.Close()
	return j.Run(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter %s: %w", nsPath, err)
		}
		return fn()
	})
}

// ExposeNetns binds a network namespace file (a pod's, under
// /var/run/netns) at the same path inside. The jail's mount table is a
// copy made when it started: a namespace file the machine bound later is
// not in it until exposed. A namespace file may be bound across mount
// namespaces (the kernel allows it for nsfs only), so the source is the
// caller's open descriptor, reached through /proc. Exposing a path twice
// does nothing.
func (j *Jail) ExposeNetns(path string) error {
	j.mu.Lock()
	done := j.exposed[path]
	j.mu.Unlock()
	if done {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	src := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	err = j.Run(func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		t, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		t.Close()
		if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s inside the jail: %w", path, err)
		}
		return nil
	})
	if err == nil {
		j.mu.Lock()
		j.exposed[path] = true
		j.mu.Unlock()
	}
	return err
}

// ForgetNetns undoes ExposeNetns: the jail's bind holds the namespace
// alive (and the links in it) for as long as it is mounted, so a runtime
// removing a pod's namespace must remove it here too.
func (j *Jail) ForgetNetns(path string) error {
	j.mu.Lock()
	done := j.exposed[path]
	delete(j.exposed, path)
	j.mu.Unlock()
	if !done {
		return nil
	}
	return j.Run(func() error {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s inside the jail: %w", path, err)
		}
		return os.Remove(path)
	})
}

// Close ends the thread (and so the mount namespace, once the processes
// started in it have exited) and removes the two temporary directories.
func (j *Jail) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.jobs)
	<-j.done
	return errors.Join(os.Remove(j.root), os.RemoveAll(j.hostDir))
}
