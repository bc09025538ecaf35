package model

import (
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

func get(t *testing.T, api kernel.API, key string) string {
	t.Helper()
	v, err := api.SysctlGet(key)
	must(t, err)
	return v
}

func TestSysctlKeys(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		key, value string
		want       syscall.Errno
	}{
		{"net/ipv4/ip_forward", "1", 0},
		{"net/ipv6/conf/all/forwarding", "1", 0},
		{"net/ipv6/conf/enia/accept_ra", "0", 0},
		{"net/ipv4/conf/default/rp_filter", "2", 0},
		{"net/ipv4/neigh/enia/base_reachable_time_ms", "15000", 0},
		{"net/core/somaxconn", "1024", 0},
		{"net/ipv6/conf/nope/accept_ra", "0", syscall.ENOENT},
		{"net/ipv4/conf/enia/nonexistent", "1", syscall.ENOENT},
		{"net/ipv4/conf/enia/mc_forwarding", "1", syscall.EACCES},
		{"net/ipv4/conf/enia/rp_filter", "abc", syscall.EINVAL},
		{"../etc/passwd", "x", syscall.EINVAL},
		{"/proc/sys/net/ipv4/ip_forward", "1", syscall.EINVAL},
	} {
		t.Run(tc.key, func(t *testing.T) {
			wantErrno(t, w.node.SysctlSet(tc.key, tc.value), tc.want)
			if tc.want == 0 {
				if v := get(t, w.node, tc.key); v != tc.value {
					t.Fatalf("read back %q", v)
				}
			}
		})
	}
	if v := get(t, w.node, "net/ipv6/conf/enia/accept_ra"); v != "0" {
		t.Fatal(v)
	}
	if v := get(t, w.pod, "net/ipv6/conf/eth0/mtu"); v != "9001" {
		t.Fatalf("IPv6 mtu of a 9001 link: %s", v)
	}
	if v := get(t, w.pod, "net/ipv6/conf/lo/accept_dad"); v != "-1" {
		t.Fatalf("lo accept_dad: %s", v)
	}
	must(t, w.node.SysctlSet("net/ipv4/conf/enia/rp_filter", " 1\n")) // as `echo 1 >` writes it
	if v := get(t, w.node, "net/ipv4/conf/enia/rp_filter"); v != "1" {
		t.Fatal(v)
	}
}

// TestSysctlPropagation: the side effects measured on Linux.
func TestSysctlPropagation(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.SysctlSet("net/ipv4/ip_forward", "1"))
	for _, k := range []string{"net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding", "net/ipv4/conf/enia/forwarding"} {
		if v := get(t, w.node, k); v != "1" {
			t.Fatalf("%s = %s after ip_forward=1", k, v)
		}
	}
	if v := get(t, w.node, "net/ipv4/conf/all/accept_redirects"); v != "0" {
		t.Fatalf("all/accept_redirects = %s with forwarding on", v)
	}
	must(t, w.node.SysctlSet("net/ipv4/conf/all/forwarding", "0"))
	if get(t, w.node, "net/ipv4/ip_forward") != "0" || get(t, w.node, "net/ipv4/conf/enia/forwarding") != "0" {
		t.Fatal("all/forwarding=0 did not reach ip_forward and the links")
	}
	must(t, w.node.SysctlSet("net/ipv4/conf/default/forwarding", "1"))
	if get(t, w.node, "net/ipv4/conf/all/forwarding") != "0" || get(t, w.node, "net/ipv4/conf/enia/forwarding") != "0" {
		t.Fatal("default/forwarding changed more than new links")
	}
	// New links copy default; IPv4 default changes reach links that never
	// had the key written.
	must(t, w.node.SysctlSet("net/ipv6/conf/default/accept_ra", "0"))
	must(t, w.node.SysctlSet("net/ipv4/conf/enia/rp_filter", "1"))
	must(t, w.node.AddBridge("br0", 0))
	if get(t, w.node, "net/ipv6/conf/br0/accept_ra") != "0" || get(t, w.node, "net/ipv4/conf/br0/forwarding") != "1" {
		t.Fatal("a new link did not copy conf/default")
	}
	must(t, w.node.SysctlSet("net/ipv4/conf/default/rp_filter", "2"))
	if get(t, w.node, "net/ipv4/conf/br0/rp_filter") != "2" || get(t, w.node, "net/ipv4/conf/enia/rp_filter") != "1" {
		t.Fatal("IPv4 default propagation")
	}
	must(t, w.node.SysctlSet("net/ipv6/conf/all/forwarding", "1"))
	if get(t, w.node, "net/ipv6/conf/enia/forwarding") != "1" || get(t, w.node, "net/ipv6/conf/default/forwarding") != "1" {
		t.Fatal("IPv6 all/forwarding")
	}
}

func TestDisableIPv6(t *testing.T) {
	w := newWorld(t)
	hv := w.index(t, w.node, "enia")
	must(t, w.node.AddrAdd(hv, cidr("2001:db8:44::1/64")))
	must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:45::/64"), LinkIndex: hv}))
	must(t, w.node.SysctlSet("net/ipv6/conf/enia/disable_ipv6", "1"))
	if as, _ := w.node.AddrList(hv, kernel.FamilyV6); len(as) != 0 {
		t.Fatalf("IPv6 addresses survived disable_ipv6: %v", as)
	}
	if rs, _ := w.node.RouteList(kernel.FamilyV6, 0); len(rs) != 0 {
		t.Fatalf("IPv6 routes survived disable_ipv6: %v", rs)
	}
	wantErrno(t, w.node.AddrAdd(hv, cidr("2001:db8:44::1/64")), syscall.EACCES)
	wantErrno(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8:45::/64"), LinkIndex: hv}), syscall.EACCES)
	wantErrno(t, w.node.NeighSet(kernel.Neigh{LinkIndex: hv, IP: ip("2001:db8::9")}), syscall.EINVAL)
	must(t, w.node.SysctlSet("net/ipv6/conf/enia/disable_ipv6", "0"))
	must(t, w.node.AddrAdd(hv, cidr("2001:db8:44::1/64")))
	// all/disable_ipv6 reaches every link, and default for new ones.
	must(t, w.pod.SysctlSet("net/ipv6/conf/all/disable_ipv6", "1"))
	if get(t, w.pod, "net/ipv6/conf/eth0/disable_ipv6") != "1" || get(t, w.pod, "net/ipv6/conf/default/disable_ipv6") != "1" {
		t.Fatal("all/disable_ipv6")
	}
}
