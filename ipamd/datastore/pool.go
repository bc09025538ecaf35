package datastore

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/cloud"
)

// PrefixLen is the size of a delegated IPv4 prefix (prefix delegation).
const PrefixLen = 28

// eni is one ENI's pod addresses.
type eni struct {
	id     string
	device int
	trunk  bool
	ipv4   []netip.Addr   // secondary addresses, sorted
	prefix []netip.Prefix // delegated /28s, sorted
	// ipv6 are delegated prefixes (IPv6 mode: on the primary ENI); pods get
	// /128s from the bottom of each, MaxIPv6PerPrefix at most.
	ipv6 []netip.Prefix
}

// ipv4Addrs is every IPv4 pod address of the ENI, in hand-out order:
// secondary addresses, then each /28's sixteen.
func (e *eni) ipv4Addrs() []netip.Addr {
	out := slices.Clone(e.ipv4)
	for _, p := range e.prefix {
		out = append(out, prefixAddrs(p)...)
	}
	return out
}

func prefixAddrs(p netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for ip := p.Addr(); p.Contains(ip); ip = ip.Next() {
		out = append(out, ip)
	}
	return out
}

// addENI adds an attached ENI and its addresses.
func (s *Store) addENI(ce cloud.ENI) error {
	for _, e := range s.enis {
		if e.device == ce.DeviceNumber || (ce.ID != "" && e.id == ce.ID) {
			return fmt.Errorf("datastore: ENI %s: device number %d or ID already present", ce.ID, ce.DeviceNumber)
		}
	}
	if ce.DeviceNumber < 0 {
		return fmt.Errorf("datastore: ENI %s: negative device number %d", ce.ID, ce.DeviceNumber)
	}
	s.poolChanges++
	e := &eni{id: ce.ID, device: ce.DeviceNumber, trunk: ce.Trunk}
	if !ce.Trunk {
		// The trunk ENI carries branch ENIs' VLANs: a pod never gets an
		// address of it, even one an inventory listed by mistake. Its
		// device number is taken all the same.
		//
		// Everything is checked before anything joins the pool: a refused
		// ENI leaves no trace (its device number stays free).
		if err := s.checkIPv4(e, ce.IPv4); err != nil {
			return err
		}
		if err := s.checkPrefixes(e, ce.IPv4Prefixes); err != nil {
			return err
		}
		for _, pfx := range ce.IPv6Prefixes {
			if !pfx.Addr().Is6() || pfx.Addr().Is4In6() || pfx.Bits() > 120 {
				return fmt.Errorf("datastore: ENI %s: %s is not an IPv6 prefix of /120 or wider", ce.ID, pfx)
			}
		}
		s.addIPv4(e, ce.IPv4)
		s.addPrefixes(e, ce.IPv4Prefixes)
		for _, pfx := range ce.IPv6Prefixes {
			e.ipv6 = append(e.ipv6, pfx.Masked())
		}
	}
	s.enis = append(s.enis, e)
	slices.SortFunc(s.enis, func(a, b *eni) int { return a.device - b.device })
	return nil
}

// checkIPv4 refuses addresses that are not IPv4, already in the pool, or
// listed twice.
func (s *Store) checkIPv4(e *eni, ips []netip.Addr) error {
	seen := map[netip.Addr]bool{}
	for _, ip := range ips {
		if !ip.Is4() || s.owner[ip] != nil || seen[ip] {
			return fmt.Errorf("datastore: ENI %s: address %s is not IPv4 or is already in the pool", e.id, ip)
		}
		seen[ip] = true
	}
	return nil
}

func (s *Store) addIPv4(e *eni, ips []netip.Addr) error {
	if err := s.checkIPv4(e, ips); err != nil {
		return err
	}
	s.poolChanges++
	for _, ip := range ips {
		s.owner[ip] = e
		e.ipv4 = append(e.ipv4, ip)
	}
	slices.SortFunc(e.ipv4, netip.Addr.Compare)
	return nil
}

// checkPrefixes refuses what is not a /28 or overlaps the pool or another
// of pfxs.
func (s *Store) checkPrefixes(e *eni, pfxs []netip.Prefix) error {
	seen := map[netip.Addr]bool{}
	for _, p := range pfxs {
		if !p.Addr().Is4() || p.Bits() != PrefixLen || p.Masked() != p {
			return fmt.Errorf("datastore: ENI %s: %s is not an IPv4 /%d prefix", e.id, p, PrefixLen)
		}
		for _, ip := range prefixAddrs(p) {
			if s.owner[ip] != nil || seen[ip] {
				return fmt.Errorf("datastore: ENI %s: prefix %s overlaps the pool at %s", e.id, p, ip)
			}
			seen[ip] = true
		}
	}
	return nil
}

func (s *Store) addPrefixes(e *eni, pfxs []netip.Prefix) error {
	if err := s.checkPrefixes(e, pfxs); err != nil {
		return err
	}
	s.poolChanges++
	for _, p := range pfxs {
		for _, ip := range prefixAddrs(p) {
			s.owner[ip] = e
		}
		e.prefix = append(e.prefix, p)
	}
	slices.SortFunc(e.prefix, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return nil
}

func (s *Store) eniByID(id string) (*eni, error) {
	for _, e := range s.enis {
		if e.id == id {
			return e, nil
		}
	}
	return nil, fmt.Errorf("%w %s", ErrUnknownENI, id)
}

// AddENI adds a newly attached ENI (the warm pool grew).
func (s *Store) AddENI(e cloud.ENI) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addENI(e)
}

// AddIPv4 adds secondary addresses EC2 assigned to an ENI.
func (s *Store) AddIPv4(eniID string, ips []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.eniByID(eniID)
	if err != nil {
		return err
	}
	return s.addIPv4(e, ips)
}

// AddIPv4Prefixes adds /28 prefixes EC2 delegated to an ENI.
func (s *Store) AddIPv4Prefixes(eniID string, pfxs []netip.Prefix) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.eniByID(eniID)
	if err != nil {
		return err
	}
	return s.addPrefixes(e, pfxs)
}

// TakeFreeIPv4 removes up to n secondary addresses of the ENI that are
// neither held nor cooling, highest first, and returns them: the warm pool
// gives them back to EC2 (and puts them back with AddIPv4 if EC2 refuses).
func (s *Store) TakeFreeIPv4(eniID string, n int) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.eniByID(eniID)
	if err != nil {
		return nil, err
	}
	now := s.opt.Now()
	var out []netip.Addr
	for i := len(e.ipv4) - 1; i >= 0 && len(out) < n; i-- {
		ip := e.ipv4[i]
		if s.usable(ip, now) {
			out = append(out, ip)
			delete(s.owner, ip)
			e.ipv4 = slices.Delete(e.ipv4, i, i+1)
		}
	}
	if len(out) > 0 {
		s.poolChanges++
	}
	return out, nil
}

// TakeFreePrefixes removes up to n /28s of the ENI none of whose addresses
// is held or cooling, highest first.
func (s *Store) TakeFreePrefixes(eniID string, n int) ([]netip.Prefix, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.eniByID(eniID)
	if err != nil {
		return nil, err
	}
	now := s.opt.Now()
	var out []netip.Prefix
	for i := len(e.prefix) - 1; i >= 0 && len(out) < n; i-- {
		p := e.prefix[i]
		addrs := prefixAddrs(p)
		if !all(addrs, func(ip netip.Addr) bool { return s.usable(ip, now) }) {
			continue
		}
		for _, ip := range addrs {
			delete(s.owner, ip)
		}
		e.prefix = slices.Delete(e.prefix, i, i+1)
		out = append(out, p)
	}
	if len(out) > 0 {
		s.poolChanges++
	}
	return out, nil
}

func all[T any](xs []T, f func(T) bool) bool {
	for _, x := range xs {
		if !f(x) {
			return false
		}
	}
	return true
}

// RemoveENI drops an ENI from the pool before the warm pool frees it. An
// ENI with assigned or cooling addresses is ErrENIInUse and stays.
func (s *Store) RemoveENI(id string) (cloud.ENI, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.eniByID(id)
	if err != nil {
		return cloud.ENI{}, err
	}
	now := s.opt.Now()
	busy := func(ip netip.Addr) bool { return !s.usable(ip, now) }
	if slices.ContainsFunc(e.ipv4Addrs(), busy) {
		return cloud.ENI{}, fmt.Errorf("%w: %s", ErrENIInUse, id)
	}
	for ip := range s.holder {
		if owner, _ := s.inIPv6Pool(ip); owner == e {
			return cloud.ENI{}, fmt.Errorf("%w: %s", ErrENIInUse, id)
		}
	}
	for _, ip := range e.ipv4Addrs() {
		delete(s.owner, ip)
		delete(s.cooling, ip)
	}
	s.poolChanges++
	s.enis = slices.DeleteFunc(s.enis, func(x *eni) bool { return x == e })
	return cloud.ENI{ID: e.id, DeviceNumber: e.device, Trunk: e.trunk, IPv4: e.ipv4,
		IPv4Prefixes: e.prefix, IPv6Prefixes: e.ipv6}, nil
}

// ENIInfo is one ENI as the pool sees it.
type ENIInfo struct {
	ID           string         `json:"id"`
	Device       int            `json:"deviceNumber"`
	RouteTable   int            `json:"routeTable"`
	Trunk        bool           `json:"trunk,omitempty"`
	IPv4         []netip.Addr   `json:"ipv4,omitempty"`
	IPv4Prefixes []netip.Prefix `json:"ipv4Prefixes,omitempty"`
	IPv6Prefixes []netip.Prefix `json:"ipv6Prefixes,omitempty"`
	Total        int            `json:"total"` // IPv4 pod addresses
	Assigned     int            `json:"assigned"`
	Cooling      int            `json:"cooling"`
}

// ENIs describes the pool's ENIs, by device number.
func (s *Store) ENIs() []ENIInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	var out []ENIInfo
	for _, e := range s.enis {
		info := ENIInfo{ID: e.id, Device: e.device, RouteTable: RouteTable(e.device), Trunk: e.trunk,
			IPv4: slices.Clone(e.ipv4), IPv4Prefixes: slices.Clone(e.prefix), IPv6Prefixes: slices.Clone(e.ipv6)}
		for _, ip := range e.ipv4Addrs() {
			info.Total++
			if _, held := s.holder[ip]; held {
				info.Assigned++
			} else if s.coolingAt(ip, now) {
				info.Cooling++
			}
		}
		for ip := range s.holder {
			if owner, _ := s.inIPv6Pool(ip); owner == e {
				info.Assigned++
			}
		}
		out = append(out, info)
	}
	return out
}

// Stats summarises the pool.
type Stats struct {
	ENIs     int `json:"enis"`     // ENIs in the pool, the trunk ENI not counted
	Total    int `json:"total"`    // IPv4 pod addresses on those ENIs
	Prefixes int `json:"prefixes"` // delegated IPv4 /28s among them
	// TotalIPv6 is how many /128s the delegated prefixes can hand out.
	TotalIPv6 int `json:"totalIPv6"`
	Assigned  int `json:"assigned"` // addresses held by a pod
	Cooling   int `json:"cooling"`  // released addresses still resting
}

// Available is how many IPv4 addresses a new pod could get now.
func (st Stats) Available() int { return st.Total - st.Assigned - st.Cooling }

// Stats summarises the pool.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	st := Stats{Assigned: len(s.allocs), Total: len(s.owner)}
	for _, e := range s.enis {
		if !e.trunk {
			st.ENIs++
		}
		st.Prefixes += len(e.prefix)
		st.TotalIPv6 += len(e.ipv6) * MaxIPv6PerPrefix
	}
	for ip := range s.cooling {
		if _, held := s.holder[ip]; !held && s.coolingAt(ip, now) {
			st.Cooling++
		}
	}
	return st
}

// GiveBack removes one secondary address from the pool, as when EC2
// unassigns it from the ENI and assigns it elsewhere: it must be held by
// nobody (a cooling one may go; its rest was this node's concern).
func (s *Store) GiveBack(ip netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, held := s.holder[ip]; held {
		return fmt.Errorf("datastore: %s is held by %s/%s", ip, k.ContainerID, k.IfName)
	}
	e, ok := s.owner[ip]
	if !ok {
		return fmt.Errorf("datastore: %s is not a secondary address of the pool", ip)
	}
	s.poolChanges++
	e.ipv4 = slices.DeleteFunc(e.ipv4, func(a netip.Addr) bool { return a == ip })
	delete(s.owner, ip)
	delete(s.cooling, ip)
	return nil
}
