// Package eninet configures the node side of each ENI ipamd manages
// (docs/reference-facts.md#per-eni-host-state): a secondary ENI's link is up
// with its primary address, its subnet route is out of main, its table
// (device+1) has the gateway and a default route, and rule 32765 sends
// traffic from its primary address to that table. Freeing the ENI removes
// the rule (the routes go with the link).
//
// With StandIn (ipamd --cloud memory), there is no hypervisor to make an
// attached ENI's link appear: ipamd makes a stand-in itself, a veth pair
// "eth<device>"/"vpc<device>" with the ENI's MAC, in its own namespace.
package eninet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// RulePriority is the priority of rule `from <ENI primary IP> lookup <table>`.
const RulePriority = 32765

// Net configures ENIs in one namespace (ipamd's, the node's).
type Net struct {
	Kernel  kernel.API
	Log     *slog.Logger
	StandIn bool
	// MTU, when not 0, is given to every ENI's link, the primary's too, as
	// the reference does with AWS_VPC_ENI_MTU (jumbo frames inside the VPC
	// by default; a smaller value where traffic leaves through a gateway
	// that fragments or drops them).
	MTU int
}

// Table is the route table of an ENI's pods and its rule 32765.
func Table(device int) int {
	if device == 0 {
		return kernel.TableMain
	}
	return device + 1
}

// LinkName is the conventional name of device d's link, eth<d>.
func LinkName(device int) string { return fmt.Sprintf("eth%d", device) }

// Link finds the ENI's link: by its MAC, as the reference does, or else by
// the conventional name (a stand-in made by a test harness whose links have
// other MACs).
func (n *Net) Link(e cloud.ENI) (kernel.Link, error) {
	links, err := n.Kernel.LinkList()
	if err != nil {
		return kernel.Link{}, err
	}
	for _, l := range links {
		if l.Kind != kernel.KindVeth && l.Kind != kernel.KindDevice && l.Kind != "" {
			continue // a VLAN of a branch ENI shares its MAC
		}
		if strings.EqualFold(l.HardwareAddr.String(), e.MAC) && e.MAC != "" {
			return l, nil
		}
	}
	for _, l := range links {
		if l.Name == LinkName(e.DeviceNumber) {
			return l, nil
		}
	}
	return kernel.Link{}, fmt.Errorf("ENI %s (device %d, MAC %s): no link with that MAC or named %s", e.ID, e.DeviceNumber, e.MAC, LinkName(e.DeviceNumber))
}

// Setup configures an attached ENI. It is idempotent: ipamd runs it for
// every ENI on every start.
func (n *Net) Setup(e cloud.ENI) error {
	l, err := n.Link(e)
	standIn := false
	if err != nil && n.StandIn {
		l, err = n.standIn(e)
		standIn = err == nil
	}
	if err != nil {
		return err
	}
	if err := n.setMTU(e, l); err != nil {
		return err
	}
	if e.DeviceNumber == 0 {
		if standIn {
			return n.primaryLikeTheOS(e, l)
		}
		return nil // the OS configured the primary ENI; ipamd leaves the rest alone
	}
	if err := n.Kernel.LinkSetUp(l.Name); err != nil {
		return fmt.Errorf("ENI %s: set %s up: %w", e.ID, l.Name, err)
	}
	if err := n.Kernel.AddrAdd(l.Index, ownership.IPNet(netip.PrefixFrom(e.PrimaryIP, e.Subnet.Bits()))); err != nil && !kernel.IsExist(err) {
		return fmt.Errorf("ENI %s: address %s on %s: %w", e.ID, e.PrimaryIP, l.Name, err)
	}
	if e.Trunk {
		return nil // the trunk carries VLANs: no table or rule of its own
	}
	table := Table(e.DeviceNumber)
	// The connected route would let traffic to the subnet bypass the ENI's
	// table; the reference deletes it.
	if err := n.Kernel.RouteDel(kernel.Route{Table: kernel.TableMain, Dst: ownership.IPNet(e.Subnet.Masked()), LinkIndex: l.Index}); err != nil && !kernel.IsNotFound(err) {
		return fmt.Errorf("ENI %s: remove the subnet route from main: %w", e.ID, err)
	}
	gw := net.IP(e.Gateway.AsSlice())
	steps := []struct {
		what string
		err  error
	}{
		{"gateway route", n.Kernel.RouteAdd(kernel.Route{Table: table, Dst: ownership.IPNet(netip.PrefixFrom(e.Gateway, 32)), LinkIndex: l.Index, Scope: kernel.ScopeLink})},
		{"default route", n.Kernel.RouteAdd(kernel.Route{Table: table, Gw: gw, LinkIndex: l.Index, Family: kernel.FamilyV4})},
		{"rule 32765", n.Kernel.RuleAdd(rule(e))},
	}
	for _, s := range steps {
		if s.err != nil && !kernel.IsExist(s.err) {
			return fmt.Errorf("ENI %s: %s in table %d: %w", e.ID, s.what, table, s.err)
		}
	}
	n.log().Info("ENI configured", "eni", e.ID, "device", e.DeviceNumber, "link", l.Name, "table", table, "primaryIP", e.PrimaryIP)
	return nil
}

// Teardown undoes Setup for an ENI about to be freed: rule 32765 goes (it
// would outlive the link), and a stand-in link is deleted as a detach
// would make the real one vanish.
func (n *Net) Teardown(e cloud.ENI) error {
	if e.DeviceNumber == 0 {
		return errors.New("eninet: the primary ENI is never torn down")
	}
	if err := n.Kernel.RuleDel(rule(e)); err != nil && !kernel.IsNotFound(err) {
		return fmt.Errorf("ENI %s: remove rule 32765: %w", e.ID, err)
	}
	if n.StandIn {
		if err := n.Kernel.LinkDel(LinkName(e.DeviceNumber)); err != nil && !kernel.IsNotFound(err) {
			return fmt.Errorf("ENI %s: remove the stand-in link: %w", e.ID, err)
		}
	}
	return nil
}

func rule(e cloud.ENI) kernel.Rule {
	return kernel.Rule{Priority: RulePriority, Family: kernel.FamilyV4, Src: ownership.IPNet(netip.PrefixFrom(e.PrimaryIP, 32)), Table: Table(e.DeviceNumber)}
}

// standIn makes the link an attach would have made.
func (n *Net) standIn(e cloud.ENI) (kernel.Link, error) {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return kernel.Link{}, fmt.Errorf("ENI %s: MAC %q: %w", e.ID, e.MAC, err)
	}
	name, peer := LinkName(e.DeviceNumber), fmt.Sprintf("vpc%d", e.DeviceNumber)
	if err := n.Kernel.AddVeth(kernel.VethSpec{Name: name, MTU: 9001, HardwareAddr: mac, PeerName: peer}); err != nil {
		return kernel.Link{}, fmt.Errorf("ENI %s: stand-in link %s: %w", e.ID, name, err)
	}
	for _, l := range []string{peer, name} {
		if err := n.Kernel.LinkSetUp(l); err != nil {
			return kernel.Link{}, err
		}
	}
	n.log().Info("stand-in link for an attached ENI", "eni", e.ID, "link", name, "mac", e.MAC)
	return n.Kernel.LinkByName(name)
}

// setMTU gives the ENI's link the configured MTU, if it has another.
func (n *Net) setMTU(e cloud.ENI, l kernel.Link) error {
	if n.MTU == 0 || l.MTU == n.MTU {
		return nil
	}
	if err := n.Kernel.LinkSetMTU(l.Name, n.MTU); err != nil {
		return fmt.Errorf("ENI %s: MTU %d on %s: %w", e.ID, n.MTU, l.Name, err)
	}
	n.log().Info("ENI MTU set", "eni", e.ID, "link", l.Name, "mtu", n.MTU, "was", l.MTU)
	return nil
}

// primaryLikeTheOS gives a stand-in primary ENI what the instance's OS
// would: its address and the default route.
func (n *Net) primaryLikeTheOS(e cloud.ENI, l kernel.Link) error {
	if err := n.Kernel.AddrAdd(l.Index, ownership.IPNet(netip.PrefixFrom(e.PrimaryIP, e.Subnet.Bits()))); err != nil && !kernel.IsExist(err) {
		return err
	}
	err := n.Kernel.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: net.IP(e.Gateway.AsSlice()), LinkIndex: l.Index, Family: kernel.FamilyV4})
	if err != nil && !kernel.IsExist(err) {
		return err
	}
	return nil
}

func (n *Net) log() *slog.Logger {
	if n.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.Log
}
