// Package cloud is ipamd's seam to AWS.
//
// This first version is deliberately tiny: it only describes the instance
// and the ENIs already attached to it, with their addresses, which is all
// a pre-filled pool needs. A later version replaces Inventory with the EC2
// and instance-metadata method sets of aws-sdk-go-v2 (so the real clients
// satisfy the seam unchanged) when ipamd starts managing a warm pool.
package cloud

import (
	"context"
	"net/netip"
)

// ENI is a network interface attached to the instance and the addresses
// EC2 has assigned to it.
type ENI struct {
	ID           string // eni-…
	MAC          string // as the instance sees it, aa:bb:cc:dd:ee:ff
	DeviceNumber int    // 0 is the primary ENI; it decides the route table
	PrimaryIP    netip.Addr
	Subnet       netip.Prefix // the ENI's subnet (IPv4)
	Gateway      netip.Addr   // the subnet's router, the first address after the base
	// IPv4 are the secondary addresses, the ones usable by pods (the
	// primary address belongs to the ENI itself).
	IPv4 []netip.Addr
	// IPv6Prefixes are prefixes delegated to the ENI (IPv6 mode hands out
	// pod addresses from the primary ENI's /80).
	IPv6Prefixes []netip.Prefix
	// Trunk marks the trunk ENI of security groups for pods: it carries
	// the branch ENIs' VLANs and has no pod addresses of its own, so the
	// datastore never hands out anything from it.
	Trunk bool
}

// Instance is the node's EC2 instance with its attached ENIs, ordered by
// device number.
type Instance struct {
	ID   string // i-…
	Type string // e.g. m5.large
	ENIs []ENI
}

// Trunk returns the instance's trunk ENI, if one is attached. EC2 attaches
// at most one per instance.
func (i Instance) Trunk() (ENI, bool) {
	for _, e := range i.ENIs {
		if e.Trunk {
			return e, true
		}
	}
	return ENI{}, false
}

// Inventory tells ipamd what the instance has. Implementations return a
// copy the caller may keep and modify.
type Inventory interface {
	Instance(ctx context.Context) (Instance, error)
}
