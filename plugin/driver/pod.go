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
	"reflect"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
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
	Table int // kernel.TableMain for the primary ENI; ownership.TableUnknown if not recorded
}

// Prefix is the host prefix (/32 or /128) of the address.
func (ip PodIP) Prefix() netip.Prefix { return ownership.HostPrefix(ip.Addr) }

func (ip PodIP) String() string {
	return fmt.Sprintf("%s table %s", ip.Addr, ownership.TableName(ip.Table))
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
	// LeaveVeth (teardown only, regular pods): remove the rules and the
	// host route and leave the veth pair, which the DEL hands to ipamd
	// (ipamd deletes it, then releases the address). Unregistering a link
	// costs the kernel an RCU grace period, 10 to 40 ms the DEL then does
	// not wait for.
	LeaveVeth bool
	// Node (teardown only) is the node as ReadNode read it a moment
	// before; the teardown reads it again unless it covers the pod's
	// addresses.
	Node *NodeView
}

// SamePod reports whether two teardown requests name the same pod: the
// same veths, addresses and branch, whatever each asks of the teardown
// (LeaveVeth) or brings it (Node).
func (p Pod) SamePod(q Pod) bool {
	p.LeaveVeth, q.LeaveVeth = false, false
	p.Node, q.Node = nil, nil
	return reflect.DeepEqual(p, q)
}

// GetIPs is the pod's addresses, none for a nil pod.
func (p *Pod) GetIPs() []PodIP {
	if p == nil {
		return nil
	}
	return p.IPs
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
func (b *Branch) Table() int { return ownership.VlanTable(b.VlanID) }

// VlanLink is the VLAN link's name.
func (b *Branch) VlanLink() string { return ownership.VlanLink(b.VlanID) }

func gateway(a netip.Addr) netip.Addr {
	if a.Is4() {
		return GatewayV4
	}
	return GatewayV6
}

// samePrefix compares a kernel prefix with a pod prefix.
func samePrefix(n *net.IPNet, p netip.Prefix) bool {
	got, ok := kernel.Prefix(n)
	return ok && got == p
}

// gwPrefix is the host prefix of a gateway address.
func gwPrefix(gw netip.Addr) netip.Prefix { return netip.PrefixFrom(gw, gw.BitLen()) }
