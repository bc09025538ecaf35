package linux

import (
	"fmt"
	"github.com/vpccni/vpccni/kernel/linux/nsthread"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sysctlPath validates a key (no "..", not absolute) and maps it under
// /proc/sys.
func sysctlPath(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "..") {
		return "", fmt.Errorf("sysctl key %q: %w", key, unix.EINVAL)
	}
	return filepath.Join("/proc/sys", key), nil
}

// inNS runs fn where /proc/sys/net shows the handle's namespace: directly
// when the caller's thread is already in it, else on a new locked thread
// that enters the namespace and leaves it again. A thread that cannot
// leave exits still locked, so the runtime discards it and no goroutine
// ever runs in a namespace it did not ask for.
//
// Only entering needs CAP_SYS_ADMIN. A handle on the current namespace
// ("") of a process whose threads stay in it (ipamd, the plugin's node
// side) always takes the direct way: its sysctls are plain reads and
// writes of /proc/sys. A "" handle used from a thread in another
// namespace than the one it was opened in is taken back there, as a
// handle on a path is: /proc/sys/net shows the calling thread's
// namespace, so writing it directly would change another namespace.
func (h *Handle) inNS(fn func() error) error {
	return h.use(func() error {
		// Locked from the check to fn's end, so fn runs on the thread
		// found to be in the namespace, not on one moved elsewhere.
		runtime.LockOSThread()
		cur, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			return err
		}
		same := cur.Equal(h.ns)
		cur.Close()
		if same {
			defer runtime.UnlockOSThread()
			return fn()
		}
		runtime.UnlockOSThread()
		return nsthread.Run(func() error { return netns.Set(h.ns) }, fn)
	})
}

// SysctlSet writes /proc/sys/<key> in the handle's namespace. Errors are
// the kernel's, wrapped in *fs.PathError: ENOENT for a key that does not
// exist, EINVAL for a value it refuses, EACCES for a read-only key.
func (h *Handle) SysctlSet(key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	return h.inNS(func() error {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(value)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		return werr
	})
}

// SysctlGet reads /proc/sys/<key> in the handle's namespace, trimmed.
func (h *Handle) SysctlGet(key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var v string
	err = h.inNS(func() error {
		b, err := os.ReadFile(p)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}
