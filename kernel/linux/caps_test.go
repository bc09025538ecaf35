package linux

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
)

// TestCurrentNamespaceWithoutSysAdmin: a handle on "" needs no
// CAP_SYS_ADMIN (ipamd runs with NET_ADMIN and NET_RAW only, as the
// reference's aws-node does). It is opened, used and its sysctls read and
// written on a thread inside a test namespace that has lost CAP_SYS_ADMIN
// (capabilities are per thread), and what it did is there seen from
// outside.
func TestCurrentNamespaceWithoutSysAdmin(t *testing.T) {
	ns := testns.Temp(t, "vpccni-nosysadmin")
	other, err := Opener{}.Open(ns.Path())
	must(t, err)
	defer other.Close()
	before, err := other.SysctlGet("net/ipv4/ip_forward")
	must(t, err)
	want := "1"
	if before == "1" {
		want = "0"
	}
	target, err := netns.GetFromPath(ns.Path())
	must(t, err)
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, in the test
		// namespace and without CAP_SYS_ADMIN, and the runtime discards it.
		runtime.LockOSThread()
		errc <- func() error {
			if err := netns.Set(target); err != nil {
				return fmt.Errorf("enter the test namespace: %w", err)
			}
			if err := dropSysAdmin(); err != nil {
				return err
			}
			if err := netns.Set(target); !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("setns without CAP_SYS_ADMIN: %v, want EPERM: the thread still has it", err)
			}
			h, err := Opener{}.Open("")
			if err != nil {
				return fmt.Errorf("Open(\"\") without CAP_SYS_ADMIN: %w", err)
			}
			defer h.Close()
			if err := h.AddBridge("br0", 0); err != nil {
				return fmt.Errorf("add br0: %w", err)
			}
			if err := h.SysctlSet("net/ipv4/ip_forward", want); err != nil {
				return fmt.Errorf("sysctl write without CAP_SYS_ADMIN: %w", err)
			}
			if v, err := h.SysctlGet("net/ipv4/ip_forward"); err != nil || v != want {
				return fmt.Errorf("sysctl read back %q, %v; want %q", v, err, want)
			}
			return nil
		}()
	}()
	must(t, <-errc)

	if _, err := other.LinkByName("br0"); err != nil {
		t.Fatalf("br0 made through Open(\"\") is not in the test namespace: %v", err)
	}
	if v, err := other.SysctlGet("net/ipv4/ip_forward"); err != nil || v != want {
		t.Fatalf("the test namespace's ip_forward is %q (%v), want %q", v, err, want)
	}
}

// dropSysAdmin removes CAP_SYS_ADMIN from the calling thread's effective
// and permitted sets (capset(2) changes the calling thread only).
func dropSysAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
	data[0].Permitted &^= 1 << unix.CAP_SYS_ADMIN
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
