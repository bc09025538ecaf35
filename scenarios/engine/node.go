package engine

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// nodeNS is the model path of the node's namespace.
const nodeNS = "node"

// eniLink names the node link of ENI device d, as on an instance.
func eniLink(device int) string { return fmt.Sprintf("eth%d", device) }

// buildNode creates the node namespace with its ENIs and their host
// networking (REFERENCE.md §3.2 "Per-ENI host state"): each ENI a link
// with its primary address; the primary ENI's default route in main; for
// every secondary ENI a table device+1 with the gateway and a default
// route, rule 32765 from its primary IP, and no subnet route in main.
//
// In IPv6 mode the primary ENI also has a global address in the /64 of its
// delegated prefix (outside the /80 pods take from) and an IPv6 default
// route via the VPC router's link-local address.
func buildNode(k *model.Kernel, inv cloud.Inventory, ipv6 bool) (kernel.API, cloud.Instance, error) {
	inst, err := inv.Instance(context.Background())
	if err != nil {
		return nil, inst, err
	}
	if err := k.AddNamespace(nodeNS); err != nil {
		return nil, inst, err
	}
	h, err := k.Open(nodeNS)
	if err != nil {
		return nil, inst, err
	}
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}} {
		if err := h.SysctlSet(kv[0], kv[1]); err != nil {
			return nil, inst, fmt.Errorf("node sysctl %s: %w", kv[0], err)
		}
	}
	for _, eni := range inst.ENIs {
		if err := setupENI(k, h, eni); err != nil {
			return nil, inst, fmt.Errorf("ENI %s (device %d): %w", eni.ID, eni.DeviceNumber, err)
		}
		if ipv6 && eni.DeviceNumber == 0 && len(eni.IPv6Prefixes) > 0 {
			if err := setupENIv6(h, eni); err != nil {
				return nil, inst, fmt.Errorf("ENI %s IPv6: %w", eni.ID, err)
			}
		}
	}
	return h, inst, nil
}

func setupENIv6(h kernel.API, eni cloud.ENI) error {
	l, err := h.LinkByName(eniLink(eni.DeviceNumber))
	if err != nil {
		return err
	}
	b := eni.IPv6Prefixes[0].Addr().As16()
	b[8] |= 0x80 // beyond the delegated /80
	b[15] = 0x0a
	addr := netip.PrefixFrom(netip.AddrFrom16(b), 64)
	if err := h.SysctlSet("net/ipv6/conf/all/forwarding", "1"); err != nil {
		return err
	}
	if err := h.AddrAdd(l.Index, prefixNet(addr)); err != nil {
		return err
	}
	return h.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: net.ParseIP("fe80::1"), LinkIndex: l.Index, Family: kernel.FamilyV6})
}

func setupENI(k *model.Kernel, h kernel.API, eni cloud.ENI) error {
	name := eniLink(eni.DeviceNumber)
	mac, err := net.ParseMAC(eni.MAC)
	if err != nil {
		return err
	}
	idx, err := k.AddDevice(nodeNS, name, 9001, mac)
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(name); err != nil {
		return err
	}
	addr := netip.PrefixFrom(eni.PrimaryIP, eni.Subnet.Bits())
	if err := h.AddrAdd(idx, prefixNet(addr)); err != nil {
		return err
	}
	gw := net.IP(eni.Gateway.AsSlice())
	if eni.Trunk {
		return nil // the trunk carries VLANs: no table or rule of its own
	}
	if eni.DeviceNumber == 0 {
		return h.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: gw, LinkIndex: idx, Family: kernel.FamilyV4})
	}
	table := eni.DeviceNumber + 1
	// The connected route would let traffic for the subnet bypass the
	// table; the reference deletes it.
	if err := h.RouteDel(kernel.Route{Table: kernel.TableMain, Dst: prefixNet(eni.Subnet.Masked()), LinkIndex: idx}); err != nil && !kernel.IsNotFound(err) {
		return err
	}
	gwHost := netip.PrefixFrom(eni.Gateway, 32)
	if err := h.RouteAdd(kernel.Route{Table: table, Dst: prefixNet(gwHost), LinkIndex: idx, Scope: kernel.ScopeLink}); err != nil {
		return err
	}
	if err := h.RouteAdd(kernel.Route{Table: table, Gw: gw, LinkIndex: idx, Family: kernel.FamilyV4}); err != nil {
		return err
	}
	return h.RuleAdd(kernel.Rule{Priority: 32765, Family: kernel.FamilyV4, Src: prefixNet(netip.PrefixFrom(eni.PrimaryIP, 32)), Table: table})
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
