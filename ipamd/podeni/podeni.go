// Package podeni tells ipamd which pods use a branch ENI (security groups
// for pods, the reference's ENABLE_POD_ENI) and which one. The VPC resource
// controller attaches a branch ENI to the node's trunk ENI for such a pod
// and records it in the pod's vpc.amazonaws.com/pod-eni annotation; ipamd
// passes it to the plugin, which builds the pod's VLAN link on the trunk.
//
// Source is the seam: Kubernetes reads the pod from the API server, as the
// reference does; Static is a map for the in-memory cloud and the scenario
// harness, which have no API server.
package podeni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// The pod's resource limit that asks for a branch ENI (matched as a
// prefix, as the reference does) and the annotation that describes it.
const (
	ResourcePrefix = "vpc.amazonaws.com/pod-eni"
	AnnotationKey  = "vpc.amazonaws.com/pod-eni"
)

// GatewayV6 is a branch ENI's IPv6 gateway: EC2's fixed link-local router
// address, whatever the subnet.
const GatewayV6 = "fe80:ec2::1"

// ErrPodNotFound means the pod does not exist (the API server said
// NotFound). DelNetwork treats it as "nothing left to free".
var ErrPodNotFound = errors.New("podeni: pod not found")

// BranchENI is the branch ENI of one pod, as the plugin needs it. Zero
// IPv4/IPv6 (and their subnets) mean the annotation did not give them.
type BranchENI struct {
	// ENIID is informational (logs): the plugin never needs it.
	ENIID    string
	VlanID   int              // 1..4094, the 802.1Q tag on the trunk
	MAC      net.HardwareAddr // the branch ENI's MAC, set on the VLAN link
	IPv4     netip.Addr
	IPv6     netip.Addr
	SubnetV4 netip.Prefix
	SubnetV6 netip.Prefix
}

// Source says whether a pod uses a branch ENI. Lookup returns nil, nil for
// a pod that does not (a regular pod), an error wrapping ErrPodNotFound
// for a pod that does not exist, and other errors as they are.
type Source interface {
	Lookup(ctx context.Context, namespace, name string) (*BranchENI, error)
}

// GatewayV4 is a branch ENI's IPv4 gateway, the subnet's base address + 1
// (EC2's VPC router). It is the zero Addr for a prefix that is not IPv4.
func GatewayV4(subnet netip.Prefix) netip.Addr {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return netip.Addr{}
	}
	return subnet.Masked().Addr().Next()
}

// Validate checks what the plugin relies on: a usable VLAN id, an EUI-48
// MAC, at least one address, each address of its family and inside its
// subnet when the subnet is given.
func (b BranchENI) Validate() error {
	if b.VlanID < 1 || b.VlanID > 4094 {
		return fmt.Errorf("vlanID %d outside 1..4094", b.VlanID)
	}
	if len(b.MAC) != 6 {
		return fmt.Errorf("MAC %q is not a 6-byte Ethernet address", b.MAC)
	}
	if !b.IPv4.IsValid() && !b.IPv6.IsValid() {
		return errors.New("neither an IPv4 nor an IPv6 address")
	}
	if b.IPv4.IsValid() && !b.IPv4.Is4() {
		return fmt.Errorf("IPv4 address %s is not IPv4", b.IPv4)
	}
	if b.IPv6.IsValid() && (!b.IPv6.Is6() || b.IPv6.Is4In6() || b.IPv6.Zone() != "") {
		return fmt.Errorf("IPv6 address %s is not a plain IPv6 address", b.IPv6)
	}
	if b.SubnetV4.IsValid() && !b.SubnetV4.Addr().Is4() {
		return fmt.Errorf("IPv4 subnet %s is not IPv4", b.SubnetV4)
	}
	if b.SubnetV6.IsValid() && (!b.SubnetV6.Addr().Is6() || b.SubnetV6.Addr().Is4In6()) {
		return fmt.Errorf("IPv6 subnet %s is not IPv6", b.SubnetV6)
	}
	// A pod address outside its subnet would get a gateway it cannot
	// reach: better refused here than a pod with no network.
	if b.IPv4.IsValid() && b.SubnetV4.IsValid() && !b.SubnetV4.Contains(b.IPv4) {
		return fmt.Errorf("IPv4 address %s is outside subnet %s", b.IPv4, b.SubnetV4)
	}
	if b.IPv6.IsValid() && b.SubnetV6.IsValid() && !b.SubnetV6.Contains(b.IPv6) {
		return fmt.Errorf("IPv6 address %s is outside subnet %s", b.IPv6, b.SubnetV6)
	}
	return nil
}

// Addressing is the pod's address and gateway in one mode: IPv4 needs the
// IPv4 address and subnet (the gateway is derived from it), IPv6 the IPv6
// address and subnet (the reference refuses an IPv6 branch pod whose
// annotation has no parsable subnetV6Cidr, though the gateway is fixed).
func (b BranchENI) Addressing(ipv6 bool) (ip, gateway netip.Addr, err error) {
	if err := b.Validate(); err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	if ipv6 {
		if !b.IPv6.IsValid() || !b.SubnetV6.IsValid() {
			return netip.Addr{}, netip.Addr{}, errors.New("IPv6 mode needs ipv6Addr and subnetV6Cidr")
		}
		return b.IPv6, netip.MustParseAddr(GatewayV6), nil
	}
	if !b.IPv4.IsValid() || !b.SubnetV4.IsValid() {
		return netip.Addr{}, netip.Addr{}, errors.New("IPv4 mode needs privateIp and subnetCidr")
	}
	return b.IPv4, GatewayV4(b.SubnetV4), nil
}

// clone copies b so a caller cannot change a Source's MAC through it.
func (b BranchENI) clone() *BranchENI {
	b.MAC = append(net.HardwareAddr(nil), b.MAC...)
	return &b
}
