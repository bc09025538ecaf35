package podeni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestGateways(t *testing.T) {
	for in, want := range map[string]string{
		"192.168.5.0/24": "192.168.5.1", "192.168.5.77/24": "192.168.5.1", "10.0.0.0/16": "10.0.0.1", "10.0.64.0/18": "10.0.64.1",
	} {
		if got := GatewayV4(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("GatewayV4(%s) = %s, want %s", in, got, want)
		}
	}
	for _, p := range []netip.Prefix{{}, netip.MustParsePrefix("2600::/64")} {
		if got := GatewayV4(p); got.IsValid() {
			t.Errorf("GatewayV4(%v) = %s, want none", p, got)
		}
	}
	if gw := netip.MustParseAddr(GatewayV6); !gw.IsLinkLocalUnicast() || gw.String() != GatewayV6 {
		t.Errorf("GatewayV6 %s", GatewayV6)
	}
}

func branch() BranchENI {
	mac, _ := net.ParseMAC("0a:00:00:00:00:07")
	return BranchENI{VlanID: 7, MAC: mac,
		IPv4: netip.MustParseAddr("192.168.5.20"), SubnetV4: netip.MustParsePrefix("192.168.5.0/24"),
		IPv6: netip.MustParseAddr("2600:1f14:b::20"), SubnetV6: netip.MustParsePrefix("2600:1f14:b::/64")}
}

func TestAddressing(t *testing.T) {
	b := branch()
	if ip, gw, err := b.Addressing(false); err != nil || ip.String() != "192.168.5.20" || gw.String() != "192.168.5.1" {
		t.Errorf("IPv4: %s %s %v", ip, gw, err)
	}
	if ip, gw, err := b.Addressing(true); err != nil || ip.String() != "2600:1f14:b::20" || gw.String() != "fe80:ec2::1" {
		t.Errorf("IPv6: %s %s %v", ip, gw, err)
	}
	cases := map[string]struct {
		mut  func(*BranchENI)
		ipv6 bool
		want string
	}{
		"v4 no address":   {func(b *BranchENI) { b.IPv4 = netip.Addr{} }, false, "needs privateIp and subnetCidr"},
		"v4 no subnet":    {func(b *BranchENI) { b.SubnetV4 = netip.Prefix{} }, false, "needs privateIp and subnetCidr"},
		"v6 no address":   {func(b *BranchENI) { b.IPv6 = netip.Addr{} }, true, "needs ipv6Addr and subnetV6Cidr"},
		"v6 no subnet":    {func(b *BranchENI) { b.SubnetV6 = netip.Prefix{} }, true, "needs ipv6Addr and subnetV6Cidr"},
		"vlan":            {func(b *BranchENI) { b.VlanID = 5000 }, false, "vlanID 5000"},
		"mac":             {func(b *BranchENI) { b.MAC = nil }, false, "6-byte"},
		"v4 in v6 slot":   {func(b *BranchENI) { b.IPv6 = netip.MustParseAddr("::ffff:10.0.0.1") }, true, "not a plain IPv6"},
		"zone":            {func(b *BranchENI) { b.IPv6 = netip.MustParseAddr("fe80::1%eth0") }, true, "not a plain IPv6"},
		"v6 subnet as v4": {func(b *BranchENI) { b.SubnetV4 = b.SubnetV6 }, false, "IPv4 subnet"},
		"v4 subnet as v6": {func(b *BranchENI) { b.SubnetV6 = b.SubnetV4 }, true, "IPv6 subnet"},
		"v6 outside":      {func(b *BranchENI) { b.SubnetV6 = netip.MustParsePrefix("2600:1f14:c::/64") }, true, "outside subnet"},
	}
	for name, c := range cases {
		b := branch()
		c.mut(&b)
		if _, _, err := b.Addressing(c.ipv6); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestStatic(t *testing.T) {
	var s Static // the zero value is usable
	ctx := context.Background()
	if b, err := s.Lookup(ctx, "default", "web"); b != nil || err != nil {
		t.Fatalf("unknown pod: %v %v", b, err)
	}
	want := branch()
	s.Set("default", "web", want)
	want.MAC[0] = 0xff // Set kept a copy
	b, err := s.Lookup(ctx, "default", "web")
	if err != nil || b == nil || b.VlanID != 7 || b.MAC.String() != "0a:00:00:00:00:07" {
		t.Fatalf("set pod: %+v %v", b, err)
	}
	b.MAC[0] = 0xee // and Lookup hands out copies
	if b, _ := s.Lookup(ctx, "default", "web"); b.MAC[0] != 0x0a {
		t.Fatal("Lookup returned the stored MAC")
	}
	if b, _ := s.Lookup(ctx, "other", "web"); b != nil {
		t.Fatal("namespace ignored")
	}
	gone := fmt.Errorf("%w: default/web", ErrPodNotFound)
	s.Fail("default", "web", gone)
	if _, err := s.Lookup(ctx, "default", "web"); !errors.Is(err, ErrPodNotFound) {
		t.Fatalf("Fail: %v", err)
	}
	s.Delete("default", "web")
	if b, err := s.Lookup(ctx, "default", "web"); b != nil || err != nil {
		t.Fatalf("deleted pod: %v %v", b, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Lookup(cctx, "default", "web"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestStaticConcurrent(t *testing.T) {
	s := NewStatic()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("p", i%2)
			for range 200 {
				s.Set("ns", name, branch())
				s.Lookup(context.Background(), "ns", name)
				s.Delete("ns", name)
			}
		}()
	}
	wg.Wait()
}

func TestLoadStatic(t *testing.T) {
	s, err := LoadStatic(strings.NewReader(`{
		"default/web": {"eniId":"eni-1","ifAddress":"0a:00:00:00:00:07","privateIp":"192.168.5.20","vlanID":7,"subnetCidr":"192.168.5.0/24"},
		"prod/db": {"ifAddress":"0a:00:00:00:00:08","ipv6Addr":"2600::8","vlanID":8,"subnetV6Cidr":"2600::/64"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Lookup(context.Background(), "default", "web"); b == nil || b.ENIID != "eni-1" || b.VlanID != 7 || GatewayV4(b.SubnetV4).String() != "192.168.5.1" {
		t.Fatalf("default/web: %+v", b)
	}
	if b, _ := s.Lookup(context.Background(), "prod", "db"); b == nil || b.IPv6.String() != "2600::8" || b.IPv4.IsValid() {
		t.Fatalf("prod/db: %+v", b)
	}
	for in, want := range map[string]string{
		`[]`:                                     "not a JSON object",
		`{"web": {}}`:                            `key "web"`,
		`{"/web": {}}`:                           `key "/web"`,
		`{"a/b/c": {}}`:                          `key "a/b/c"`,
		`{"a/b": {"vlanID":7,"privateIP2":"x"}}`: `unknown field "privateIP2"`,
		`{"a/b": {"vlanID":7}}`:                  "a/b: no ifAddress",
		`{"a/b": {"ifAddress":"0a:00:00:00:00:07","privateIp":"10.0.0.1","vlanID":0}}`: "a/b: vlanID 0",
	} {
		if _, err := LoadStatic(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

func TestReadStaticFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.json")
	if _, err := ReadStaticFile(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(path, []byte(`{"a/b": 1}`), 0o644)
	if _, err := ReadStaticFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file: %v", err)
	}
	os.WriteFile(path, []byte(`{"a/b": {"ifAddress":"0a:00:00:00:00:07","privateIp":"10.0.0.1","vlanID":1}}`), 0o644)
	if s, err := ReadStaticFile(path); err != nil {
		t.Fatal(err)
	} else if b, _ := s.Lookup(context.Background(), "a", "b"); b == nil || b.VlanID != 1 {
		t.Fatalf("a/b: %+v", b)
	}
}
