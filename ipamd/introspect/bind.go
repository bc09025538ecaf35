package introspect

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// unixPrefix marks a Unix-socket address, as INTROSPECTION_BIND_ADDRESS
// accepts it in the reference (unix:/run/ipamd-introspect.sock).
const unixPrefix = "unix:"

// socketMode is the Unix socket's permission: introspection shows every
// pod's address and the node's ENIs, which is for root only.
const socketMode = 0o600

// ErrNotLoopback is returned (wrapped) for a TCP address that other hosts
// could reach while Config.AllowNonLoopback is false.
var ErrNotLoopback = errors.New("introspection would be reachable from other hosts")

// listen binds address: "unix:<path>" or host:port, where the host must be
// loopback unless allowNonLoopback.
func listen(address string, allowNonLoopback bool) (net.Listener, error) {
	if path, ok := strings.CutPrefix(address, unixPrefix); ok {
		return listenUnix(path)
	}
	if err := checkTCPAddress(address, allowNonLoopback); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("introspection: listen on %s: %w", address, err)
	}
	// "localhost" is resolved by the system; a hosts file mapping it to a
	// routable address would otherwise slip past the check above.
	if !allowNonLoopback {
		if bound, ok := l.Addr().(*net.TCPAddr); !ok || !bound.IP.IsLoopback() {
			l.Close()
			return nil, notLoopbackError(fmt.Sprintf("%s resolved to %s, which is not a loopback address", address, l.Addr()))
		}
	}
	return l, nil
}

// checkTCPAddress validates host:port and, unless allowNonLoopback,
// refuses a host that is not a loopback IP or "localhost". An empty host
// (":61679") means every interface and is refused too.
func checkTCPAddress(address string, allowNonLoopback bool) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("introspection address %q: want host:port or %s<path>: %w", address, unixPrefix, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("introspection address %q: port %q is not a number from 0 to 65535", address, port)
	}
	if allowNonLoopback || isLoopbackHost(host) {
		return nil
	}
	return notLoopbackError(fmt.Sprintf("%q is not a loopback address", address))
}

func notLoopbackError(why string) error {
	return fmt.Errorf("%w: %s; set INTROSPECTION_BIND_ADDRESS to a loopback address or allow it explicitly", ErrNotLoopback, why)
}

// isLoopbackHost reports whether host is "localhost" or an IP in
// 127.0.0.0/8 or ::1 (an IPv4-mapped IPv6 form included).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// listenUnix serves on a Unix socket at path with mode socketMode.
func listenUnix(path string) (net.Listener, error) {
	if path == "" {
		return nil, fmt.Errorf("introspection address %q: empty socket path", unixPrefix)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("introspection: listen on %s%s: %w", unixPrefix, path, err)
	}
	// Between Listen and Chmod the socket has the umask's mode; connecting
	// needs write permission, which the usual 022 umask denies to others,
	// so the window exposes nothing.
	if err := os.Chmod(path, socketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("introspection: chmod %s: %w", path, err)
	}
	return l, nil
}

// removeStaleSocket removes a socket file left behind by a previous ipamd
// that died without closing it; binding over it would fail with "address
// already in use". A socket something still listens on is refused rather
// than taken over, and anything else at path is left alone and refused: a
// mistyped path must not delete a real file.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("introspection: %w", err)
	case info.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("introspection: %s exists and is not a socket", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("introspection: %s is in use by another process", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("introspection: remove stale socket: %w", err)
	}
	return nil
}
