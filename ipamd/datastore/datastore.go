// Package datastore is ipamd's allocator: the pool of pod addresses per
// ENI and who holds each. An allocation is keyed by (network name,
// container ID, interface name), as the CNI spec makes that triple unique.
//
// State is in memory only in this version: a restarted ipamd has forgotten
// every pod, which is exactly the condition of the #2048 incident. The
// state is a plain value (ENIs, then allocations) so a checkpoint can
// serialise it later.
package datastore

import (
	"errors"
	"net/netip"
	"sort"
	"sync"

	"github.com/vpccni/vpccni/cloud"
)

// ErrUnknownPod is returned by Release for a key that holds nothing. Its
// text is the reference's, which the reference plugin matches as a
// substring of the gRPC error.
var ErrUnknownPod = errors.New("datastore: unknown pod")

// ErrNoAvailableIP means the pool is exhausted.
var ErrNoAvailableIP = errors.New("datastore: no available IP addresses")

// TableMain is the route table of the primary ENI's addresses.
const TableMain = 254

// Key identifies an allocation.
type Key struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Meta describes the pod holding an allocation.
type Meta struct {
	PodNamespace string `json:"k8sPodNamespace,omitempty"`
	PodName      string `json:"k8sPodName,omitempty"`
}

// Allocation is one assigned address.
type Allocation struct {
	Key          Key
	Meta         Meta
	IP           netip.Addr
	DeviceNumber int
	RouteTable   int
}

// Stats summarises the pool.
type Stats struct {
	Total    int
	Assigned int
	ENIs     int
}

type eni struct {
	device int
	addrs  []netip.Addr // pod addresses, sorted
}

// Store is the allocator. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	enis   []eni // sorted by device number
	byKey  map[Key]Allocation
	holder map[netip.Addr]Key
}

// New builds a store over the instance's ENIs.
func New(inst cloud.Instance) *Store {
	s := &Store{byKey: map[Key]Allocation{}, holder: map[netip.Addr]Key{}}
	for _, e := range inst.ENIs {
		addrs := append([]netip.Addr(nil), e.IPv4...)
		sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
		s.enis = append(s.enis, eni{device: e.DeviceNumber, addrs: addrs})
	}
	sort.Slice(s.enis, func(i, j int) bool { return s.enis[i].device < s.enis[j].device })
	return s
}

// RouteTable is the table of an ENI's addresses (REFERENCE.md §3.1).
func RouteTable(device int) int {
	if device == 0 {
		return TableMain
	}
	return device + 1
}

// Assign gives key an address: the same one again if it already holds one
// (a retried ADD), else the lowest free address of preferDevice, else of
// the lowest device that has one. preferDevice < 0 means any.
func (s *Store) Assign(key Key, meta Meta, preferDevice int) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.byKey[key]; ok {
		return a, nil
	}
	order := make([]eni, 0, len(s.enis))
	for _, e := range s.enis {
		if e.device == preferDevice {
			order = append([]eni{e}, order...)
		} else {
			order = append(order, e)
		}
	}
	for _, e := range order {
		for _, ip := range e.addrs {
			if _, held := s.holder[ip]; held {
				continue
			}
			a := Allocation{Key: key, Meta: meta, IP: ip, DeviceNumber: e.device, RouteTable: RouteTable(e.device)}
			s.byKey[key] = a
			s.holder[ip] = key
			return a, nil
		}
	}
	return Allocation{}, ErrNoAvailableIP
}

// Release frees key's address and returns what it was.
func (s *Store) Release(key Key) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.byKey[key]
	if !ok {
		return Allocation{}, ErrUnknownPod
	}
	delete(s.byKey, key)
	delete(s.holder, a.IP)
	return a, nil
}

// Allocations lists the assigned addresses, sorted by address.
func (s *Store) Allocations() []Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Allocation, 0, len(s.byKey))
	for _, a := range s.byKey {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP.Less(out[j].IP) })
	return out
}

// Free reports whether ip is in the pool and unassigned.
func (s *Store) Free(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.holder[ip]; held {
		return false
	}
	for _, e := range s.enis {
		for _, a := range e.addrs {
			if a == ip {
				return true
			}
		}
	}
	return false
}

// Stats summarises the pool.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Assigned: len(s.byKey), ENIs: len(s.enis)}
	for _, e := range s.enis {
		st.Total += len(e.addrs)
	}
	return st
}
