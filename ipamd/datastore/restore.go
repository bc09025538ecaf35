package datastore

import (
	"fmt"
	"net/netip"
)

// Dropped is an allocation Restore could not take back, and why.
type Dropped struct {
	Allocation Allocation
	Reason     string
}

// Restore takes back allocations a previous ipamd made (from its
// checkpoint, or rebuilt from the kernel). Each one's address must be in
// the pool as EC2 has it now and held by nobody else; the device and table
// are recomputed from the ENI that has the address today. What cannot be
// taken back is returned with the reason, for the log and for the caller
// to clean up after: the reference drops such entries silently.
func (s *Store) Restore(allocs []Allocation) (kept []Allocation, dropped []Dropped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range allocs {
		reason := s.restorable(a)
		if reason != "" {
			dropped = append(dropped, Dropped{Allocation: a, Reason: reason})
			continue
		}
		e, _ := s.eniOf(a.IP)
		a.DeviceNumber, a.RouteTable = e.device, RouteTable(e.device)
		s.allocs[a.Key] = a
		s.holder[a.IP] = a.Key
		delete(s.cooling, a.IP)
		s.changes++
		kept = append(kept, a)
	}
	return kept, dropped
}

func (s *Store) restorable(a Allocation) string {
	if !a.Key.valid() {
		return "incomplete key"
	}
	if _, ok := s.allocs[a.Key]; ok {
		return "key already holds an address"
	}
	if !a.IP.IsValid() {
		return "no address"
	}
	if prev, held := s.holder[a.IP]; held {
		return fmt.Sprintf("address already held by %s/%s", prev.ContainerID, prev.IfName)
	}
	if _, ok := s.eniOf(a.IP); !ok {
		return "address is on no ENI of this instance any more"
	}
	return ""
}

// RecoveredKey is the key of an allocation rebuilt from the kernel: the
// host veth names the pod (by its name hash) until a DEL or the reconciler
// ends it.
func RecoveredKey(hostVeth string) Key {
	return Key{NetworkName: RecoveredNetwork, ContainerID: hostVeth, IfName: "eth0"}
}

// HolderOf returns the allocation holding ip, if any.
func (s *Store) HolderOf(ip netip.Addr) (Allocation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.holder[ip]
	if !ok {
		return Allocation{}, false
	}
	return s.allocs[k], true
}
