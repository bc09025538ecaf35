package testns

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// PlugENIs gives a node namespace the links of two attached ENIs as the
// instance's OS leaves them: veth pairs stand in for them (eth0/vpc0,
// eth1/vpc1, the peer keeping the carrier up); eth0, the primary, has its
// address in 10.0.1.0/24 and in the /64 of the memory cloud's delegated
// IPv6 prefix (2600:1f14:a:1::/80), and the default routes; eth1 has its
// address in 10.0.2.0/24. ipamd adds eth1's table and rule 32765 when it
// starts (--cloud memory, inside a named namespace). The plugin tears down
// only addresses in these ENIs' subnets, so every real-kernel node of the
// suites, the containerd suite's and the bench's is built here.
func PlugENIs(h kernel.API) error {
	for d := 0; d < 2; d++ {
		name, peer := fmt.Sprintf("eth%d", d), fmt.Sprintf("vpc%d", d)
		if err := h.AddVeth(kernel.VethSpec{Name: name, PeerName: peer, MTU: 9001}); err != nil {
			return fmt.Errorf("ENI %s: %w", name, err)
		}
		for _, l := range []string{name, peer} {
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		addrs := []string{fmt.Sprintf("10.0.%d.10/24", d+1)}
		if d == 0 {
			addrs = append(addrs, "2600:1f14:a:1:8000::a/64")
		}
		for _, a := range addrs {
			if err := h.AddrAdd(l.Index, IfAddr(a)); err != nil {
				return fmt.Errorf("ENI %s: address %s: %w", name, a, err)
			}
		}
		if d != 0 {
			continue
		}
		for _, r := range []kernel.Route{
			{Gw: net.ParseIP("10.0.1.1"), LinkIndex: l.Index, Family: kernel.FamilyV4},
			{Gw: net.ParseIP("fe80::1"), LinkIndex: l.Index, Family: kernel.FamilyV6},
		} {
			if err := h.RouteAdd(r); err != nil {
				return fmt.Errorf("ENI %s: default route via %s: %w", name, r.Gw, err)
			}
		}
	}
	return nil
}

// IfAddr is an interface address: the address itself with its prefix's
// length ("10.0.1.10/24").
func IfAddr(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
