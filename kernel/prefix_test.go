package kernel

import (
	"net"
	"net/netip"
	"testing"
)

func TestPrefix(t *testing.T) {
	v4 := net.ParseIP("10.0.0.5") // 16-byte form
	for _, c := range []struct {
		name string
		n    *net.IPNet
		want string
		ok   bool
	}{
		{"4-byte address and mask", &net.IPNet{IP: v4.To4(), Mask: net.CIDRMask(24, 32)}, "10.0.0.5/24", true},
		{"16-byte address, 16-byte mask", &net.IPNet{IP: v4, Mask: net.CIDRMask(120, 128)}, "10.0.0.5/24", true},
		{"host", &net.IPNet{IP: v4.To4(), Mask: net.CIDRMask(32, 32)}, "10.0.0.5/32", true},
		{"IPv6", &net.IPNet{IP: net.ParseIP("2001:db8::1"), Mask: net.CIDRMask(64, 128)}, "2001:db8::1/64", true},
		{"a mask that is no prefix", &net.IPNet{IP: v4.To4(), Mask: net.IPv4Mask(255, 0, 255, 0)}, "invalid Prefix", false},
		{"an IPv4 address under a short 16-byte mask", &net.IPNet{IP: v4.To4(), Mask: net.CIDRMask(64, 128)}, "invalid Prefix", false},
		{"nil", nil, "invalid Prefix", false},
	} {
		p, ok := Prefix(c.n)
		if ok != c.ok || p.String() != c.want {
			t.Errorf("%s: %s %v, want %s %v", c.name, p, ok, c.want, c.ok)
		}
	}
	// Not masked, and containing as net.IPNet does.
	p, _ := Prefix(&net.IPNet{IP: v4.To4(), Mask: net.CIDRMask(24, 32)})
	if !p.Contains(netip.MustParseAddr("10.0.0.200")) || p.Contains(netip.MustParseAddr("10.0.1.5")) {
		t.Errorf("%s contains the wrong addresses", p)
	}
}
