package ipamd

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vpccni/vpccni/ipamd/datastore"
)

// The /v1/enis body in the reference's shape, so its tools (and the
// scripts operators wrote against it) read vpccni's ipamd unchanged: an
// object keyed by network card ("0": ipamd manages card 0 only), each
// with the card's address counts and its ENIs by ID, each ENI with its
// address ranges (a secondary address as a /32, a delegated prefix as
// itself) and, in each range, the addresses that are or were lately a
// pod's. Like the reference since it stopped naming containers, the key
// has no container ID or interface name; the pod's name is in the
// metadata. Field names are the reference's, without JSON tags on its
// side: Go's exported names.

type refCard struct {
	TotalIPs    int
	AssignedIPs int
	ENIs        map[string]refENI
}

type refENI struct {
	ID                  string
	IsPrimary           bool
	IsTrunk             bool
	IsEFA               bool
	DeviceNumber        int
	AvailableIPv4Cidrs  map[string]refCidr
	IPv6Cidrs           map[string]refCidr
	IsExcludedForPodIPs bool
	RouteTableID        int
	SubnetID            string
}

type refCidr struct {
	Cidr          net.IPNet
	IPAddresses   map[string]refAddress
	IsPrefix      bool
	AddressFamily string // empty, as the reference's endpoint leaves it
}

type refAddress struct {
	Address        string
	IPAMKey        refKey
	IPAMMetadata   refMeta
	AssignedTime   time.Time
	UnassignedTime time.Time
}

type refKey struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

type refMeta struct {
	K8SPodNamespace string `json:"k8sPodNamespace,omitempty"`
	K8SPodName      string `json:"k8sPodName,omitempty"`
	InterfacesCount int    `json:"interfacesCount,omitempty"`
}

// referenceENIs builds the body from one look at the store.
func (d *Daemon) referenceENIs() map[string]refCard {
	allocs := map[netip.Addr]datastore.Allocation{}
	for _, a := range d.store.Allocations() {
		allocs[a.IP] = a
	}
	cooling := d.store.CoolingSince()
	subnets := map[string]string{}
	for _, e := range d.inst.ENIs {
		subnets[e.ID] = e.SubnetID
	}
	card := refCard{ENIs: map[string]refENI{}}
	for _, e := range d.store.ENIs() {
		subnet, ok := subnets[e.ID]
		if !ok {
			subnet = d.inst.SubnetID // the warm pool creates ENIs in the primary's subnet
		}
		re := refENI{ID: e.ID, IsPrimary: e.Device == 0, IsTrunk: e.Trunk, DeviceNumber: e.Device,
			AvailableIPv4Cidrs: map[string]refCidr{}, IPv6Cidrs: map[string]refCidr{}, RouteTableID: e.RouteTable,
			SubnetID: subnet}
		for _, ip := range e.IPv4 {
			re.AvailableIPv4Cidrs[netip.PrefixFrom(ip, 32).String()] = cidrOf(netip.PrefixFrom(ip, 32), false, allocs, cooling)
		}
		for _, p := range e.IPv4Prefixes {
			re.AvailableIPv4Cidrs[p.String()] = cidrOf(p, true, allocs, cooling)
		}
		for _, p := range e.IPv6Prefixes {
			re.IPv6Cidrs[p.String()] = cidrOf(p, true, allocs, cooling)
		}
		card.TotalIPs += e.Total
		card.AssignedIPs += e.Assigned
		card.ENIs[e.ID] = re
	}
	if d.cfg.IPv6 {
		st := d.store.Stats()
		card.TotalIPs, card.AssignedIPs = st.TotalIPv6, st.Assigned
	}
	return map[string]refCard{strconv.Itoa(0): card}
}

// cidrOf is one range with the addresses in it that a pod holds or held
// within the cooldown.
func cidrOf(p netip.Prefix, isPrefix bool, allocs map[netip.Addr]datastore.Allocation, cooling map[netip.Addr]time.Time) refCidr {
	c := refCidr{Cidr: net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		IPAddresses: map[string]refAddress{}, IsPrefix: isPrefix}
	add := func(ip netip.Addr) {
		if a, held := allocs[ip]; held {
			c.IPAddresses[ip.String()] = refAddress{Address: ip.String(), IPAMKey: refKey{NetworkName: a.Key.NetworkName},
				IPAMMetadata: refMeta{K8SPodNamespace: a.Meta.PodNamespace, K8SPodName: a.Meta.PodName}, AssignedTime: a.Since}
		} else if t, ok := cooling[ip]; ok {
			c.IPAddresses[ip.String()] = refAddress{Address: ip.String(), UnassignedTime: t}
		}
	}
	if p.Bits() == p.Addr().BitLen() {
		add(p.Addr())
		return c
	}
	// A prefix: only its addresses that are held or cooling are listed,
	// so walk those rather than 2^(128-80) addresses of an IPv6 /80.
	for ip := range allocs {
		if p.Contains(ip) {
			add(ip)
		}
	}
	for ip := range cooling {
		if p.Contains(ip) {
			add(ip)
		}
	}
	return c
}
