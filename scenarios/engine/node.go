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

// buildNode creates the node namespace with the links of the attached ENIs
// (the hypervisor's part) and the primary ENI's address and default route
// (the OS's part). ipamd configures the others when it starts: each
// secondary ENI's table device+1 with the gateway and a default route,
// rule 32765 from its primary IP, no subnet route in main
// (docs/reference-facts.md#per-eni-host-state).
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
		idx, err := plug(k, eni)
		if err != nil {
			return nil, inst, fmt.Errorf("ENI %s (device %d): %w", eni.ID, eni.DeviceNumber, err)
		}
		if eni.DeviceNumber != 0 {
			continue
		}
		if err := setupPrimary(h, eni, idx); err != nil {
			return nil, inst, fmt.Errorf("primary ENI %s: %w", eni.ID, err)
		}
		if ipv6 && len(eni.IPv6Prefixes) > 0 {
			if err := setupENIv6(h, eni); err != nil {
				return nil, inst, fmt.Errorf("ENI %s IPv6: %w", eni.ID, err)
			}
		}
	}
	return h, inst, nil
}

// plug makes an attached ENI's link appear, down, with the ENI's MAC.
func plug(k *model.Kernel, eni cloud.ENI) (int, error) {
	mac, err := net.ParseMAC(eni.MAC)
	if err != nil {
		return 0, err
	}
	return k.AddDevice(nodeNS, eniLink(eni.DeviceNumber), 9001, mac)
}

// plugENI and unplugENI are the memory cloud's attach and detach hooks.
func (r *run) plugENI(eni cloud.ENI) {
	if _, err := plug(r.kern, eni); err != nil {
		r.note("attach %s: its link did not appear: %v", eni.ID, err)
	}
}

func (r *run) unplugENI(eni cloud.ENI) {
	if err := r.node.LinkDel(eniLink(eni.DeviceNumber)); err != nil && !kernel.IsNotFound(err) {
		r.note("detach %s: %v", eni.ID, err)
	}
}

func setupPrimary(h kernel.API, eni cloud.ENI, idx int) error {
	if err := h.LinkSetUp(eniLink(eni.DeviceNumber)); err != nil {
		return err
	}
	if err := h.AddrAdd(idx, prefixNet(netip.PrefixFrom(eni.PrimaryIP, eni.Subnet.Bits()))); err != nil {
		return err
	}
	return h.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: net.IP(eni.Gateway.AsSlice()), LinkIndex: idx, Family: kernel.FamilyV4})
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

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
