// Package ownership says, once for every remover, what on a node is a
// pod's: the pod layout (rule priorities, route tables, the names of a
// pod's links), the exact shape of each pod rule, which addresses and
// tables the node itself shows to be its pods', and how Linux matches a
// rule delete request. The plugin's teardown, GC and CHECK, ipamd's
// reconciler and recovery, and the harness's invariants all ask this
// package, so they cannot disagree about what may be removed.
//
// It depends on nothing but kernel.API: it is the ground floor that the
// plugin and ipamd both stand on (ipamd never imports the plugin).
// docs/architecture.md#ownership states the rules in prose.
package ownership

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// Rule priorities of the pod path (the reference's, so that a node can
// move between the two plugins with pods running).
const (
	PrioVlanIIF = 10    // iif <branch pod link> lookup <VLAN table> (strict branch pods)
	PrioToPod   = 512   // to <pod IP> lookup main
	PrioFromPod = 1536  // from <pod IP> lookup <ENI or VLAN table>
	PrioENI     = 32765 // from <secondary ENI's primary IP> lookup <ENI table> (ipamd's)
)

// Route tables.
const (
	// TableUnknown is a teardown source that did not record the table.
	TableUnknown = 0
	// VlanTableOffset: a branch ENI's table is its VLAN id plus this.
	VlanTableOffset = 100
	// firstDeviceTable is the table of device 1; device N > 0 uses N+1.
	firstDeviceTable = 2
	maxPodTable      = 65535
)

// ENITable is the route table of an ENI's pods: main for the primary ENI
// (device 0), device+1 for the others.
func ENITable(device int) int {
	if device == 0 {
		return kernel.TableMain
	}
	return device + 1
}

// VlanTable is the route table of a branch ENI's pod.
func VlanTable(vlanID int) int { return vlanID + VlanTableOffset }

// IsPodTable reports whether a table may hold a pod's egress routes: main,
// a per-ENI table (device+1), a VLAN table (vlanID+100) or a multi-card
// table (10000+). It refuses the tables the kernel keeps for itself (local
// 255, default 253, unspec 0) and the reserved 1 and 252, so that a forged
// teardown source can never name them.
func IsPodTable(t int) bool {
	switch {
	case t == kernel.TableMain:
		return true
	case t < firstDeviceTable, t == kernel.TableDefault, t == kernel.TableLocal, t > maxPodTable:
		return false
	}
	return true
}

// ValidVlan: an 802.1Q id whose table (id+100) is a pod table. VLANs 153
// and 155 would name the kernel's default and local tables and are refused.
func ValidVlan(id int) bool { return id >= 1 && id <= 4094 && IsPodTable(VlanTable(id)) }

// IsVlanTable reports whether t is the table of some valid VLAN.
func IsVlanTable(t int) bool { return ValidVlan(t - VlanTableOffset) }

// ValidPodAddr reports whether an address can be a pod's at all: a global
// unicast address (no loopback, multicast, link-local, unspecified or
// IPv4-mapped IPv6 address). Whether it is a pod address of this node is
// Node's question.
func ValidPodAddr(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() && !a.Is4In6()
}

// TableName prints a table the way `ip rule` does.
func TableName(t int) string {
	switch t {
	case kernel.TableMain:
		return "main"
	case kernel.TableLocal:
		return "local"
	case kernel.TableDefault:
		return "default"
	case TableUnknown:
		return "unknown"
	}
	return fmt.Sprint(t)
}

// HostPrefix is the /32 or /128 of an address.
func HostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// Family is an address's kernel family.
func Family(a netip.Addr) kernel.Family {
	if a.Is4() {
		return kernel.FamilyV4
	}
	return kernel.FamilyV6
}

// FamilyOfAll is the one family of the addresses, FamilyAll when they
// have both or there are none.
func FamilyOfAll(addrs []netip.Addr) kernel.Family {
	fam := kernel.FamilyAll
	for i, a := range addrs {
		if i > 0 && Family(a) != fam {
			return kernel.FamilyAll
		}
		fam = Family(a)
	}
	return fam
}

// IPNet is a prefix in the form kernel.API takes.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// HostAddr is the address of a kernel selector that is exactly a host
// prefix (/32 for IPv4, /128 for IPv6) of the family and could be a pod's;
// false for a wider prefix, a family mismatch, link-local or multicast.
func HostAddr(n *net.IPNet, fam kernel.Family) (netip.Addr, bool) {
	p, ok := kernel.Prefix(n)
	if !ok || p.Bits() != p.Addr().BitLen() {
		return netip.Addr{}, false
	}
	a := p.Addr()
	if (fam == kernel.FamilyV4 && !a.Is4()) || (fam == kernel.FamilyV6 && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a, ValidPodAddr(a)
}
