package node

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nodeNS is a model node with eth0 (the default route's) and eth1.
func nodeNS(t *testing.T) kernel.API {
	t.Helper()
	k := model.New()
	if err := k.AddNamespace("node"); err != nil {
		t.Fatal(err)
	}
	h, err := k.Open("node")
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"eth0", "eth1"} {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}
		if _, err := k.AddDevice("node", name, 9001, mac); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(name); err != nil {
			t.Fatal(err)
		}
	}
	eth1, _ := h.LinkByName("eth1")
	if err := h.AddrAdd(eth1.Index, &net.IPNet{IP: net.IP{10, 0, 0, 5}, Mask: net.CIDRMask(24, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: net.IP{10, 0, 0, 1}, LinkIndex: eth1.Index}); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestPrimaryInterface: the default route's link, not the first link.
func TestPrimaryInterface(t *testing.T) {
	h := nodeNS(t)
	if name, err := PrimaryInterface(h); err != nil || name != "eth1" {
		t.Fatalf("%q %v, want eth1 (the default route's)", name, err)
	}
	k := model.New()
	k.AddNamespace("bare")
	bare, _ := k.Open("bare")
	if _, err := PrimaryInterface(bare); err == nil {
		t.Error("no default route: no error")
	}
}

// TestSysctls: the reference's values land in the namespace, IPv6's only
// with IPv6, and tcp_early_demux follows DISABLE_TCP_EARLY_DEMUX.
func TestSysctls(t *testing.T) {
	for _, c := range []struct {
		s    InitSettings
		want map[string]string
	}{
		{InitSettings{}, map[string]string{"net/ipv4/conf/eth1/rp_filter": "2", "net/ipv4/tcp_early_demux": "1",
			"net/ipv6/conf/all/forwarding": "0", "net/ipv6/conf/eth1/accept_ra": "1", "net/ipv4/conf/eth0/rp_filter": "0"}},
		{InitSettings{NoEarlyDemux: true, IPv6: true}, map[string]string{"net/ipv4/conf/eth1/rp_filter": "2", "net/ipv4/tcp_early_demux": "0",
			"net/ipv6/conf/all/forwarding": "1", "net/ipv6/conf/all/disable_ipv6": "0", "net/ipv6/conf/eth1/accept_ra": "2"}},
	} {
		h := nodeNS(t)
		if err := ApplySysctls(h, quiet, Sysctls(c.s, "eth1")); err != nil {
			t.Fatal(err)
		}
		for k, want := range c.want {
			if got, err := h.SysctlGet(k); err != nil || got != want {
				t.Errorf("%+v: %s = %q (%v), want %s", c.s, k, got, err, want)
			}
		}
	}
}

// TestSysctlsOnAMissingKey: a key the kernel lacks is left out only when
// optional; the primary interface's must exist.
func TestSysctlsOnAMissingKey(t *testing.T) {
	h := nodeNS(t)
	if err := ApplySysctls(h, quiet, []Sysctl{{Key: "net/ipv4/no_such_key", Value: "1", IfPresent: true}}); err != nil {
		t.Errorf("optional missing key: %v", err)
	}
	if err := ApplySysctls(h, quiet, Sysctls(InitSettings{}, "eth9")); err == nil {
		t.Error("rp_filter of a missing interface: no error")
	}
}
