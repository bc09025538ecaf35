package testns

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// probeVlan runs inside a scratch namespace: a bridge as the parent, a
// VLAN on it.
func probeVlan(reason *string) error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("bridge for the VLAN probe: %w", err)
	}
	l, err := netlink.LinkByName("probe0")
	if err != nil {
		return err
	}
	v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe0.5", ParentIndex: l.Attrs().Index}, VlanId: 5}
	if err := netlink.LinkAdd(v); err != nil {
		*reason = "this kernel cannot create VLAN (802.1Q) links: " + err.Error()
	}
	return nil
}
