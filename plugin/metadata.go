package plugin

// What ipamd's replies say of a pod's addresses, read by both ADD (the
// addresses it sets up) and DEL (the addresses it tears down).

import (
	"net/netip"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// ipsFromMetadata validates ipamd's per-IP metadata: ipamd is trusted to
// allocate, not to name arbitrary tables.
// A branch pod's addresses use its VLAN's table whatever ipamd says.
func ipsFromMetadata(md []*rpc.IPAllocationMetadata, vlan int) ([]driver.PodIP, int, error) {
	var ips []driver.PodIP
	device := -1
	for _, m := range md {
		text := m.GetIPv4Addr()
		if text == "" {
			text = m.GetIPv6Addr()
		}
		if text == "" {
			continue
		}
		a, err := netip.ParseAddr(text)
		if err != nil || !ownership.ValidPodAddr(a) || (m.GetIPv4Addr() != "" && !a.Is4()) || (m.GetIPv4Addr() == "" && !a.Is6()) {
			return nil, 0, errorf(ErrIpamd, "ipamd returned %q, not a pod address of its family", text)
		}
		table := int(m.GetRouteTableId())
		switch {
		case vlan != 0:
			table = vlan + ownership.VlanTableOffset
		case table == 0 || table == 1:
			table = kernel.TableMain
			if m.GetDeviceNumber() > 0 {
				table = int(m.GetDeviceNumber()) + 1
			}
		case !ownership.IsPodTable(table):
			return nil, 0, errorf(ErrIpamd, "ipamd returned route table %d, not a pod table", table)
		}
		if device < 0 {
			device = int(m.GetDeviceNumber())
		}
		ips = append(ips, driver.PodIP{Addr: a.Unmap(), Table: table})
	}
	if device < 0 {
		device = 0
	}
	return ips, device, nil
}
