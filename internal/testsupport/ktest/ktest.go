// Package ktest holds the small helpers the kernel tests share.
package ktest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// Prefix parses a CIDR keeping the address as written (host bits too,
// IPv4 in its 4-byte form), as addresses are given to AddrAdd.
func Prefix(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	if ip.To4() != nil {
		n.IP = ip.To4()
	}
	return n
}

// Must fails the test on an error.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// Errno is the errno an error carries, 0 if none.
func Errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
