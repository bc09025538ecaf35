// Package datastore is ipamd's allocator: the pool of pod addresses per
// ENI and which pod holds each. An allocation is keyed by (network name,
// container ID, interface name), the triple the CNI spec makes unique per
// attachment, so a retried ADD finds its address again.
//
// State is in memory only in this version: a restarted ipamd has forgotten
// every pod. That is deliberate (it is the very condition of the #2048
// incident the scenarios replay); a checkpoint comes later. To make that
// easy the state is a plain value, the ENIs' address lists and a map of
// allocations, with no pointers between them; the other fields of Store
// are indexes rebuilt from those two.
package datastore

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/vpccni/vpccni/cloud"
)

// ErrUnknownPod is returned by Release for a key that holds nothing. Its
// text is exactly the reference's, which the reference's plugin looks for
// as a substring of the gRPC error: do not reword it.
var ErrUnknownPod = errors.New("datastore: unknown pod")

// ErrNoAvailableIP means every address of the pool is held.
var ErrNoAvailableIP = errors.New("datastore: no available IP addresses")

// ErrInvalidKey means a key with an empty field: such a key cannot be told
// apart from another pod's, so it never gets an address.
var ErrInvalidKey = errors.New("datastore: network name, container ID and interface name are all required")

// ErrUnsupportedFamily is returned for a family the pool has no addresses
// of yet (IPv6 comes with prefix delegation).
var ErrUnsupportedFamily = errors.New("datastore: address family not supported")

// TableMain is the route table of the primary ENI's addresses.
const TableMain = 254

// Family is an address family.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return fmt.Sprintf("family(%d)", int(f))
}

// Key identifies an allocation. The JSON names are those of the
// reference's checkpoint (vpc-cni-ipam/1), for the checkpoint to come.
type Key struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

func (k Key) valid() bool { return k.NetworkName != "" && k.ContainerID != "" && k.IfName != "" }

// Meta describes the pod holding an allocation. It is informational (logs,
// reconciliation): the key alone decides who holds what.
type Meta struct {
	PodNamespace string `json:"k8sPodNamespace,omitempty"`
	PodName      string `json:"k8sPodName,omitempty"`
}

// Allocation is one assigned address and where it lives.
type Allocation struct {
	Key          Key
	Meta         Meta
	IP           netip.Addr
	DeviceNumber int // the ENI's device number
	RouteTable   int // the ENI's route table, see RouteTable
}

// Stats summarises the pool.
type Stats struct {
	ENIs  int // ENIs in the pool (a trunk ENI is not)
	Total int // IPv4 pod addresses on those ENIs
	// TotalIPv6 is how many /128s the delegated prefixes can hand out.
	TotalIPv6 int
	Assigned  int // addresses held by a pod
}

// RouteTable is the table a pod's "from" rule uses for an ENI's addresses,
// as the reference does (REFERENCE.md §3.1): main for the primary ENI,
// device+1 for a secondary one.
func RouteTable(device int) int {
	if device == 0 {
		return TableMain
	}
	return device + 1
}

// pool is one ENI's pod addresses.
type pool struct {
	device int
	ipv4   []netip.Addr // sorted, so "lowest free" is a scan
	// ipv6 are delegated prefixes (IPv6 mode: on the primary ENI); pods get
	// /128s from the bottom of each, MaxIPv6PerPrefix at most.
	ipv6 []netip.Prefix
}

// MaxIPv6PerPrefix bounds what ipamd hands out of one delegated prefix: far
// more than a node's pods, and it keeps "lowest free" a short scan.
const MaxIPv6PerPrefix = 4096

// Store is the allocator. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	pools  []pool              // sorted by device number
	allocs map[Key]Allocation  // the state proper
	holder map[netip.Addr]Key  // index of allocs by address
	known  map[netip.Addr]bool // every pool address, for IsFree
}

// New builds a store over the instance's ENIs with every address free. It
// refuses an inventory that would let one address be handed out twice
// (two ENIs with one device number, an address on two ENIs).
func New(inst cloud.Instance) (*Store, error) {
	s := &Store{allocs: map[Key]Allocation{}, holder: map[netip.Addr]Key{}, known: map[netip.Addr]bool{}}
	devices := map[int]bool{}
	for _, e := range inst.ENIs {
		if devices[e.DeviceNumber] || e.DeviceNumber < 0 {
			return nil, fmt.Errorf("datastore: ENI %s: device number %d is negative or taken", e.ID, e.DeviceNumber)
		}
		devices[e.DeviceNumber] = true
		if e.Trunk {
			// The trunk ENI carries branch ENIs' VLANs: a pod never gets
			// an address of it, even one an inventory listed by mistake.
			// Its device number stays taken above.
			continue
		}
		p := pool{device: e.DeviceNumber}
		for _, ip := range e.IPv4 {
			if !ip.Is4() || s.known[ip] {
				return nil, fmt.Errorf("datastore: ENI %s: address %s is not IPv4 or is listed twice", e.ID, ip)
			}
			s.known[ip] = true
			p.ipv4 = append(p.ipv4, ip)
		}
		slices.SortFunc(p.ipv4, netip.Addr.Compare)
		for _, pfx := range e.IPv6Prefixes {
			if !pfx.Addr().Is6() || pfx.Addr().Is4In6() || pfx.Bits() > 120 {
				return nil, fmt.Errorf("datastore: ENI %s: %s is not an IPv6 prefix of /120 or wider", e.ID, pfx)
			}
			p.ipv6 = append(p.ipv6, pfx.Masked())
		}
		s.pools = append(s.pools, p)
	}
	slices.SortFunc(s.pools, func(a, b pool) int { return a.device - b.device })
	return s, nil
}

// Assign gives key an address of the family. A key that already holds one
// gets the same allocation back whatever the other arguments (a retried
// ADD must not take a second address). Otherwise the choice is
// deterministic: the lowest free address of preferDevice if that ENI has
// one, else the lowest free address of the lowest-numbered ENI that has
// one. preferDevice < 0 means no preference. An exhausted pool is
// ErrNoAvailableIP.
func (s *Store) Assign(key Key, meta Meta, family Family, preferDevice int) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.allocs[key]; ok {
		return a, nil
	}
	if !key.valid() {
		return Allocation{}, ErrInvalidKey
	}
	switch family {
	case IPv4:
	case IPv6:
		// IPv6 needs prefix delegation, as in the reference: addresses come
		// from the delegated prefixes (the primary ENI's), in order.
		for _, p := range s.pools {
			for _, pfx := range p.ipv6 {
				if ip, ok := s.lowestFreeIn(pfx); ok {
					return s.hold(key, meta, p.device, ip), nil
				}
			}
		}
		return Allocation{}, ErrNoAvailableIP
	default:
		return Allocation{}, fmt.Errorf("%w: %s", ErrUnsupportedFamily, family)
	}
	if preferDevice >= 0 {
		for _, p := range s.pools {
			if p.device == preferDevice {
				if ip, ok := s.lowestFree(p); ok {
					return s.hold(key, meta, p.device, ip), nil
				}
			}
		}
	}
	for _, p := range s.pools {
		if ip, ok := s.lowestFree(p); ok {
			return s.hold(key, meta, p.device, ip), nil
		}
	}
	return Allocation{}, ErrNoAvailableIP
}

func (s *Store) lowestFree(p pool) (netip.Addr, bool) {
	for _, ip := range p.ipv4 {
		if _, held := s.holder[ip]; !held {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// lowestFreeIn scans a delegated prefix from its first host address.
func (s *Store) lowestFreeIn(pfx netip.Prefix) (netip.Addr, bool) {
	ip := pfx.Addr().Next()
	for i := 0; i < MaxIPv6PerPrefix && pfx.Contains(ip); i++ {
		if _, held := s.holder[ip]; !held {
			return ip, true
		}
		ip = ip.Next()
	}
	return netip.Addr{}, false
}

// inPrefixPool reports whether ip is one an IPv6 prefix would hand out.
func (s *Store) inPrefixPool(ip netip.Addr) bool {
	for _, p := range s.pools {
		for _, pfx := range p.ipv6 {
			if pfx.Contains(ip) && ip != pfx.Addr() {
				return true
			}
		}
	}
	return false
}

func (s *Store) hold(key Key, meta Meta, device int, ip netip.Addr) Allocation {
	a := Allocation{Key: key, Meta: meta, IP: ip, DeviceNumber: device, RouteTable: RouteTable(device)}
	s.allocs[key] = a
	s.holder[ip] = key
	return a
}

// Release frees key's address and returns the allocation it was, so the
// caller can tear the pod down from it. A key that holds nothing (never
// assigned, already released, or assigned before a restart) is
// ErrUnknownPod.
func (s *Store) Release(key Key) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocs[key]
	if !ok {
		return Allocation{}, ErrUnknownPod
	}
	delete(s.allocs, key)
	delete(s.holder, a.IP)
	return a, nil
}

// Lookup returns key's allocation, if it holds one.
func (s *Store) Lookup(key Key) (Allocation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocs[key]
	return a, ok
}

// Allocations lists the assigned addresses, sorted by address (no two
// allocations share one).
func (s *Store) Allocations() []Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Allocation, 0, len(s.allocs))
	for _, a := range s.allocs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Allocation) int { return a.IP.Compare(b.IP) })
	return out
}

// IsFree reports whether ip belongs to the pool and no pod holds it.
func (s *Store) IsFree(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held := s.holder[ip]
	return (s.known[ip] || s.inPrefixPool(ip)) && !held
}

// Stats summarises the pool.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{ENIs: len(s.pools), Total: len(s.known), Assigned: len(s.allocs)}
	for _, p := range s.pools {
		st.TotalIPv6 += len(p.ipv6) * MaxIPv6PerPrefix
	}
	return st
}
