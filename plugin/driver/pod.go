// Package driver makes and removes the kernel objects of one pod.
//
// It speaks only to kernel.API: it knows nothing of CNI JSON, gRPC or
// ipamd. The plugin decides which teardown to run and from which source;
// the driver carries it out and says what it did.
package driver

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// Rule priorities the pod path owns (docs/reference-facts.md#rule-priorities-and-tables).
const (
	PrioVlanIIF     = 10   // iif rules of branch-ENI pods (strict)
	PrioToPod       = 512  // to <pod IP> lookup main
	PrioFromPod     = 1536 // from <pod IP> lookup <ENI table>
	TableUnknown    = 0    // a teardown source that did not record the table
	maxPodTable     = 65535
	firstDeviceTabl = 2 // device N > 0 uses table N+1
)

// Pod gateways: the pod side routes everything through a link-local
// gateway answered by a static neighbour entry for the host veth's MAC.
var (
	GatewayV4 = netip.MustParseAddr("169.254.1.1")
	GatewayV6 = netip.MustParseAddr("fe80::1")
)

// PodIP is one address of a pod and the route table its egress uses.
type PodIP struct {
	Addr  netip.Addr
	Table int // kernel.TableMain for the primary ENI; TableUnknown if not recorded
}

// Prefix is the host prefix (/32 or /128) of the address.
func (ip PodIP) Prefix() netip.Prefix { return netip.PrefixFrom(ip.Addr, ip.Addr.BitLen()) }

func (ip PodIP) String() string {
	return fmt.Sprintf("%s table %s", ip.Addr, TableName(ip.Table))
}

// Pod names a pod's kernel objects.
type Pod struct {
	HostVeth    string // host side of the veth pair
	ContainerIf string // CNI_IFNAME inside the pod namespace
	MTU         int
	IPs         []PodIP
	// MACSeed makes the host veth's MAC reproducible (the container ID is
	// a good seed): the same pod always gets the same MAC, so scenario
	// replays are deterministic and a restarted ADD does not churn ARP.
	MACSeed string
	// Branch is set for a pod on a branch ENI (security groups for pods).
	Branch *Branch
}

// Branch is a pod's branch ENI: a VLAN on the trunk ENI with its own
// route table, vlanID+100.
type Branch struct {
	VlanID      int
	ENIMAC      net.HardwareAddr // setup only
	SubnetGW    netip.Addr       // setup only
	ParentIndex int              // the trunk ENI's link index; setup only
	// Strict selects the enforcing mode of setup: strict (prio-10 iif
	// rules, all of the pod's traffic through the branch ENI) or standard
	// (rules 512/1536 with the VLAN table). Teardown removes both.
	Strict bool
}

// Table is the branch ENI's route table.
func (b *Branch) Table() int { return b.VlanID + VlanTableOffset }

// VlanLink is the VLAN link's name.
func (b *Branch) VlanLink() string { return fmt.Sprintf("vlan.eth.%d", b.VlanID) }

// VlanTableOffset: a branch ENI's table is its VLAN id plus this.
const VlanTableOffset = 100

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

// IsPodTable reports whether a table may hold a pod's egress routes: main,
// a per-ENI table (device+1), a VLAN table (vlanID+100) or a multi-card
// table (10000+). It refuses the tables the kernel keeps for itself
// (local 255, default 253, unspec 0) and the reserved 1 and 252, so that a
// forged teardown source can never name them.
func IsPodTable(t int) bool {
	switch {
	case t == kernel.TableMain:
		return true
	case t < firstDeviceTabl, t == kernel.TableDefault, t == kernel.TableLocal, t > maxPodTable:
		return false
	}
	return true
}

// ValidPodAddr reports whether an address can be a pod's: a global unicast
// address (no loopback, multicast, link-local or unspecified).
func ValidPodAddr(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() && !a.Is4In6()
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func family(a netip.Addr) kernel.Family {
	if a.Is4() {
		return kernel.FamilyV4
	}
	return kernel.FamilyV6
}

func gateway(a netip.Addr) netip.Addr {
	if a.Is4() {
		return GatewayV4
	}
	return GatewayV6
}

// samePrefix compares a kernel prefix with a pod prefix.
func samePrefix(n *net.IPNet, p netip.Prefix) bool {
	if n == nil {
		return false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return false
	}
	ones, bits := n.Mask.Size()
	return a.Unmap() == p.Addr() && ones == p.Bits() && bits == p.Addr().BitLen()
}

// gwPrefix is the host prefix of a gateway address.
func gwPrefix(gw netip.Addr) netip.Prefix { return netip.PrefixFrom(gw, gw.BitLen()) }

// validVlan: an 802.1Q id whose table (id+100) is a pod table. VLANs 153
// and 155 would name the kernel's default and local tables and are refused.
func validVlan(id int) bool { return id >= 1 && id <= 4094 && IsPodTable(id+VlanTableOffset) }
