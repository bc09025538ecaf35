package ipamd

import (
	"bytes"
	"fmt"
	"net"
	"strings"

	"github.com/vpccni/vpccni/kernel"
)

// TrunkIndexByMAC finds the trunk ENI's link in the namespace api is bound
// to by its MAC, the one name EC2 and the kernel share (the device name
// depends on the driver and on udev). VLAN links are skipped: a VLAN on
// the trunk inherits the trunk's MAC unless given another.
func TrunkIndexByMAC(api kernel.API, mac string) (int, error) {
	want, err := net.ParseMAC(mac)
	if err != nil {
		return 0, fmt.Errorf("trunk ENI MAC %q: %w", mac, err)
	}
	links, err := api.LinkList()
	if err != nil {
		return 0, fmt.Errorf("list links: %w", err)
	}
	var found []kernel.Link
	for _, l := range links {
		if l.Kind != kernel.KindVlan && bytes.Equal(l.HardwareAddr, want) {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("no link with the trunk ENI's MAC %s in this network namespace", want)
	case 1:
		return found[0].Index, nil
	}
	names := make([]string, len(found))
	for i, l := range found {
		names[i] = fmt.Sprintf("%s (index %d)", l.Name, l.Index)
	}
	return 0, fmt.Errorf("%d links have the trunk ENI's MAC %s: %s", len(found), want, strings.Join(names, ", "))
}
