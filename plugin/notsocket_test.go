package plugin

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestIpamdPathNotASocket: a regular file or a directory where ipamd's
// socket belongs is named as such by every verb that dials ipamd, not
// reported as "connection refused" (what connecting to it gives, and
// what a dead ipamd gives too).
func TestIpamdPathNotASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ipamd.sock")
	if err := os.WriteFile(file, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, what string }{{file, "a regular file"}, {dir, "a directory"}} {
		addr := "unix://" + c.path
		want := "ipamd's socket path " + c.path + " is not a socket (it is " + c.what + ")"
		t.Run(c.what+"/ADD", func(t *testing.T) {
			r := newRig(t)
			r.p.env.Dial = DialGRPC
			r.expectHandles(true)
			_, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"ipamdAddress": addr})))
			wantCode(t, err, types.ErrTryAgainLater)
			notRefused(t, err, want)
		})
		t.Run(c.what+"/STATUS", func(t *testing.T) {
			p := New(Env{})
			err := p.Status(cmdArgs(netconf(t, map[string]any{"cniVersion": "1.1.0", "ipamdAddress": addr})))
			wantCode(t, err, types.ErrPluginNotAvailable)
			notRefused(t, err, want)
		})
		t.Run(c.what+"/dialers", func(t *testing.T) {
			if _, _, err := DialGRPC(addr); err == nil || err.Error() != want {
				t.Errorf("DialGRPC: %v, want %q", err, want)
			}
			if _, _, _, err := dialInventory(addr); err == nil || err.Error() != want {
				t.Errorf("dialInventory: %v, want %q", err, want)
			}
		})
	}
}

func notRefused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if s := AsCNIError(err).Details; !strings.Contains(s, want) || strings.Contains(s, "connection refused") {
		t.Errorf("error details %q, want %q", s, want)
	}
}

// TestCheckSocket: a socket, a missing path (the dial says "no such
// file") and a TCP address pass; anything else at the path does not.
func TestCheckSocket(t *testing.T) {
	sock := shortSock(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, target := range []string{"unix://" + sock, "unix://" + sock + ".missing", "127.0.0.1:50051"} {
		if err := checkSocket(target); err != nil {
			t.Errorf("%s: %v", target, err)
		}
	}
	if err := checkSocket("unix://" + os.DevNull); err == nil || !strings.Contains(err.Error(), "is not a socket (it is a device)") {
		t.Errorf("%s: %v", os.DevNull, err)
	}
}
