// Package cloud is the seam between ipamd and AWS. This first version only
// describes the instance and its attached ENIs; the EC2 and instance
// metadata method sets (aws-sdk-go-v2) come with the warm-pool manager.
package cloud

import (
	"context"
	"net/netip"
)

// ENI is an attached network interface and the addresses it holds.
type ENI struct {
	ID           string
	MAC          string
	DeviceNumber int
	PrimaryIP    netip.Addr
	Subnet       netip.Prefix
	Gateway      netip.Addr
	// IPv4 are the secondary addresses usable by pods.
	IPv4 []netip.Addr
	// IPv6Prefixes are delegated prefixes (primary ENI, IPv6 mode).
	IPv6Prefixes []netip.Prefix
}

// Instance is the node's EC2 instance.
type Instance struct {
	ID   string
	Type string
	ENIs []ENI
}

// Inventory tells ipamd what the instance has.
type Inventory interface {
	Instance(ctx context.Context) (Instance, error)
}
