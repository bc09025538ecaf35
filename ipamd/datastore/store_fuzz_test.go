package datastore

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ownership"
)

// FuzzStore drives the allocator with sequences of the calls ipamd makes
// of it (Assign and Release from the handlers, Undo and Reinstate when a
// checkpoint write fails, ReleaseKey from the reconciler, Restore at
// start, the warm pool growing and shrinking the pool) on a simulated
// clock with a cooldown, and checks every call against a model and, after
// every call, the store's invariants:
//   - every pool address is exactly one of held, cooling and free (an
//     address in none of them is lost to the pool for good);
//   - no address is held by two keys, Stats().Assigned is the number of
//     allocations, every allocated address is a pool address, HolderOf and
//     Lookup agree with Allocations, and the allocations are the model's;
//   - Assign is idempotent per key, never hands out a held or cooling
//     address or the trunk ENI's, honours the preferred device when it
//     has a free address, and is ErrNoAvailableIP only when nothing is
//     free;
//   - Release of a key that holds nothing (and names no recovered pod) is
//     ErrUnknownPod; the warm pool never takes a held or cooling address.
//
// The handler target (ipamd's FuzzHandlers) reaches the store only
// through gRPC-shaped requests without a cooldown; this one reaches what
// those cannot.
func FuzzStore(f *testing.F) {
	f.Add([]byte{})
	// Assign, retry, release, assign during the cooldown, wait, again.
	f.Add([]byte{0, 0x00, 0, 0x00, 2, 0x00, 0, 0x01, 6, 40, 0, 0x02})
	// Exhaust IPv4 with preferences, free one, refuse during cooldown.
	f.Add([]byte{0, 0x08, 0, 0x09, 0, 0x0a, 0, 0x13, 0, 0x1c, 0, 0x00, 0, 0x01, 0, 0x02, 2, 0x01, 0, 0x03, 6, 31, 0, 0x03})
	// Release, then the checkpoint write fails: Reinstate; Assign then
	// Undo.
	f.Add([]byte{0, 0x00, 2, 0x00, 5, 0, 0, 0x01, 4, 0})
	// Pool changes: take free addresses, give them back, remove and add an
	// ENI, take and give back a prefix.
	f.Add([]byte{7, 0x09, 8, 0x05, 10, 0x07, 10, 0x03, 0, 0x1b, 9, 0x05, 9, 0x01, 8, 0x01})
	// IPv6, Restore (valid, on the trunk, off the pool, twice), recovered
	// pods released by name.
	f.Add([]byte{1, 0x00, 1, 0x01, 11, 0x00, 11, 0x21, 11, 0x26, 11, 0x3e, 11, 0x07, 2, 0x08, 2, 0x0d, 3, 0x06})

	f.Fuzz(func(t *testing.T, data []byte) {
		c := fixedClock()
		inst := cloud.Instance{ENIs: []cloud.ENI{
			{ID: "eni-0", DeviceNumber: 0, IPv4: addrs("10.0.1.11", "10.0.1.12", "10.0.1.13"), IPv6Prefixes: []netip.Prefix{fzV6Prefix}},
			{ID: "eni-1", DeviceNumber: 1, IPv4: addrs("10.0.2.11", "10.0.2.12"), IPv4Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.3.0/28")}},
			// The trunk: an address listed by mistake is never a pod's.
			{ID: "eni-2", DeviceNumber: 2, Trunk: true, IPv4: addrs(fzTrunkAddr.String())},
		}}
		s, err := NewWithOptions(inst, Options{Cooldown: fzCooldown, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		m := newFzModel(inst)
		for i := 0; len(data) >= 2 && i < 100; i++ {
			op, arg := data[0], data[1]
			data = data[2:]
			m.step = fmt.Sprintf("op %d (%d, %#x)", i, op%12, arg)
			m.apply(t, s, c, op%12, arg)
			m.check(t, s, c.Now())
		}
	})
}

const fzCooldown = 30 * time.Second

// fzRecoveredIndex is the ifindex of the host veths the recovered
// allocations were rebuilt from.
const fzRecoveredIndex = 7

var (
	fzV6Prefix  = netip.MustParsePrefix("2600:1f14:a::/120")
	fzTrunkAddr = netip.MustParseAddr("10.0.9.9")
	// fzRecovered is the pod whose allocations Restore rebuilt from the
	// kernel (keys 6 and 7: its eni and vlan veths).
	fzRecovered = Meta{PodNamespace: "default", PodName: "web-7", HostVethIndex: fzRecoveredIndex}
	fzKeys      = []Key{key(0), key(1), key(2), {NetworkName: "aws-cni", ContainerID: "c3", IfName: "eth1"},
		{NetworkName: "aws-cni", ContainerID: "c0", IfName: "eth1"}, {ContainerID: "c5", IfName: "eth0"},
		RecoveredKey("eni" + ownership.PodSuffix("default", "web-7", 0)), RecoveredKey("vlan" + ownership.PodSuffix("default", "web-7", 0))}
	fzMetas = []Meta{{}, fzRecovered, {PodNamespace: "default", PodName: "web-1"},
		{PodNamespace: "default", PodName: "web-7"}, {PodNamespace: "default", PodName: "web-7", HostVethIndex: fzRecoveredIndex + 1}}
	// fzRestoreIPs: pool addresses, the trunk's, one off the pool, the
	// IPv6 prefix's first host and its network address, none.
	fzRestoreIPs = []netip.Addr{netip.MustParseAddr("10.0.1.11"), netip.MustParseAddr("10.0.1.12"), netip.MustParseAddr("10.0.2.11"),
		netip.MustParseAddr("10.0.3.5"), fzTrunkAddr, netip.MustParseAddr("192.0.2.1"), fzV6Prefix.Addr().Next(), fzV6Prefix.Addr(), {}}
	fzENIIDs = []string{"eni-0", "eni-1", "eni-2", "eni-3"}
	// fzPoolENIs: where the warm pool adds addresses (never the trunk)
	// and one it does not have.
	fzPoolENIs = []string{"eni-0", "eni-1", "eni-3", "eni-9"}
)

// fzModel is what the store should hold.
type fzModel struct {
	step     string
	owner    map[netip.Addr]string    // IPv4 pool address -> ENI
	prefixes map[netip.Prefix]string  // delegated /28 -> ENI
	device   map[string]int           // ENI -> device (trunk included)
	v6       bool                     // the IPv6 prefix is in the pool (eni-0 there)
	held     map[Key]netip.Addr       // the allocations
	released map[netip.Addr]time.Time // last release, for the cooldown
	taken    []netip.Addr             // given back to "EC2", may come back
	takenPfx []netip.Prefix           // likewise
	last     struct{ assigned, released Allocation }
	next     int // for fresh addresses
}

func newFzModel(inst cloud.Instance) *fzModel {
	m := &fzModel{owner: map[netip.Addr]string{}, prefixes: map[netip.Prefix]string{}, device: map[string]int{},
		held: map[Key]netip.Addr{}, released: map[netip.Addr]time.Time{}, v6: true}
	for _, e := range inst.ENIs {
		m.device[e.ID] = e.DeviceNumber
		if e.Trunk {
			continue
		}
		for _, ip := range e.IPv4 {
			m.owner[ip] = e.ID
		}
		for _, p := range e.IPv4Prefixes {
			m.prefixes[p] = e.ID
			for _, ip := range prefixAddrs(p) {
				m.owner[ip] = e.ID
			}
		}
	}
	return m
}

func (m *fzModel) holder(ip netip.Addr) (Key, bool) {
	for k, a := range m.held {
		if a == ip {
			return k, true
		}
	}
	return Key{}, false
}

func (m *fzModel) cooling(ip netip.Addr, now time.Time) bool {
	t, ok := m.released[ip]
	return ok && now.Sub(t) < fzCooldown
}

func (m *fzModel) inV6Pool(ip netip.Addr) bool {
	return m.v6 && fzV6Prefix.Contains(ip) && ip != fzV6Prefix.Addr()
}

func (m *fzModel) inPool(ip netip.Addr) bool {
	_, ok := m.owner[ip]
	return ok || m.inV6Pool(ip)
}

// usable: in the pool, held by nobody, rested.
func (m *fzModel) usable(ip netip.Addr, now time.Time) bool {
	_, held := m.holder(ip)
	return m.inPool(ip) && !held && !m.cooling(ip, now)
}

func (m *fzModel) anyUsable(now time.Time, want func(netip.Addr) bool) bool {
	for ip := range m.owner {
		if want(ip) && m.usable(ip, now) {
			return true
		}
	}
	return false
}

func (m *fzModel) apply(t *testing.T, s *Store, c *clock, op, arg byte) {
	t.Helper()
	now := c.Now()
	k := fzKeys[arg&7]
	valid := k.valid() && !k.Recovered()
	switch op {
	case 0, 1: // Assign
		fam, prefer := IPv4, int(arg>>3)%5-1
		if op == 1 {
			fam = IPv6
		}
		meta := Meta{PodNamespace: "default", PodName: k.ContainerID}
		a, err := s.Assign(k, meta, fam, prefer)
		prev, isHeld := m.held[k]
		switch {
		case isHeld:
			if err != nil || a.IP != prev {
				t.Fatalf("%s: Assign of %v, which holds %s: %v %v", m.step, k, prev, a.IP, err)
			}
		case !valid:
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("%s: Assign of the incomplete or reserved key %v: %v %v", m.step, k, a.IP, err)
			}
		case errors.Is(err, ErrNoAvailableIP):
			if (fam == IPv4 && m.anyUsable(now, func(netip.Addr) bool { return true })) ||
				(fam == IPv6 && m.v6 && m.usable(fzV6Prefix.Addr().Next(), now)) {
				t.Fatalf("%s: ErrNoAvailableIP with a free address in the pool", m.step)
			}
		case err != nil:
			t.Fatalf("%s: Assign: %v", m.step, err)
		default:
			if !m.usable(a.IP, now) || a.IP.Is4() != (fam == IPv4) {
				h, held := m.holder(a.IP)
				t.Fatalf("%s: Assign handed out %s (in pool %v, held by %v %v, cooling %v)", m.step, a.IP, m.inPool(a.IP), h, held, m.cooling(a.IP, now))
			}
			if fam == IPv4 && prefer >= 0 && a.DeviceNumber != prefer &&
				m.anyUsable(now, func(ip netip.Addr) bool { return m.device[m.owner[ip]] == prefer }) {
				t.Fatalf("%s: preferred device %d has a free address, got %s on device %d", m.step, prefer, a.IP, a.DeviceNumber)
			}
			if a.Key != k || a.RouteTable != RouteTable(a.DeviceNumber) {
				t.Fatalf("%s: allocation %+v for %v", m.step, a, k)
			}
			m.held[k] = a.IP
			delete(m.released, a.IP)
			m.last.assigned = a
		}
	case 2, 3: // Release (handler), ReleaseKey (reconciler)
		meta := fzMetas[int(arg>>3)%len(fzMetas)]
		var a Allocation
		var err error
		if op == 2 {
			a, err = s.Release(k, meta)
		} else {
			a, err = s.ReleaseKey(k)
		}
		want, isHeld := m.held[k]
		var candidates []Key // what a Release by name may find instead
		// Only a sandbox naming the recovered veth's ifindex may.
		if !isHeld && op == 2 && meta.PodName != "" && meta.HostVethIndex == fzRecoveredIndex {
			for hk := range m.held {
				if hk.Recovered() && ownership.HasPodSuffix(hk.ContainerID, meta.PodNamespace, meta.PodName) {
					candidates = append(candidates, hk)
				}
			}
		}
		switch {
		case isHeld:
			if err != nil || a.IP != want || a.Key != k {
				t.Fatalf("%s: release of %v, which holds %s: %+v %v", m.step, k, want, a, err)
			}
		case len(candidates) > 0:
			if err != nil || !slices.Contains(candidates, a.Key) || m.held[a.Key] != a.IP {
				t.Fatalf("%s: release by name of %v: %+v %v (candidates %v)", m.step, meta, a, err, candidates)
			}
		default:
			if !errors.Is(err, ErrUnknownPod) {
				t.Fatalf("%s: release of %v, which holds nothing: %+v %v", m.step, k, a, err)
			}
			return
		}
		delete(m.held, a.Key)
		m.released[a.IP] = now
		m.last.released = a
	case 4: // Undo: the Assign's checkpoint write failed
		a := m.last.assigned
		s.Undo(a)
		if cur, ok := m.held[a.Key]; ok && cur == a.IP && a.IP.IsValid() {
			delete(m.held, a.Key)
		}
	case 5: // Reinstate: the Release's checkpoint write failed
		a := m.last.released
		err := s.Reinstate(a)
		_, taken := m.holder(a.IP)
		_, keyBusy := m.held[a.Key]
		switch {
		case !a.IP.IsValid():
			if err == nil {
				t.Fatalf("%s: Reinstate of nothing succeeded", m.step)
			}
		case taken || keyBusy || !m.inPool(a.IP):
			if err == nil {
				t.Fatalf("%s: Reinstate of %s succeeded although it is held, its key holds another address, or it is out of the pool", m.step, a.IP)
			}
		case err != nil:
			t.Fatalf("%s: Reinstate of %+v: %v", m.step, a, err)
		default:
			m.held[a.Key] = a.IP
			delete(m.released, a.IP)
		}
	case 6:
		c.Advance(time.Duration(arg) * time.Second)
	case 7: // the warm pool gives free secondary addresses back
		id := fzENIIDs[arg&3]
		got, err := s.TakeFreeIPv4(id, int(arg>>2)&7)
		if _, ok := m.device[id]; !ok {
			if err == nil {
				t.Fatalf("%s: TakeFreeIPv4 of unknown %s", m.step, id)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: TakeFreeIPv4(%s): %v", m.step, id, err)
		}
		for _, ip := range got {
			if m.owner[ip] != id || !m.usable(ip, now) || m.inSomePrefix(ip) {
				t.Fatalf("%s: TakeFreeIPv4(%s) took %s (owner %q, usable %v)", m.step, id, ip, m.owner[ip], m.usable(ip, now))
			}
			delete(m.owner, ip)
			m.taken = append(m.taken, ip)
		}
	case 8: // EC2 assigns secondary addresses (back, or fresh ones)
		id := fzPoolENIs[arg&3]
		var ips []netip.Addr
		if arg&4 != 0 && len(m.taken) > 0 {
			ips = []netip.Addr{m.taken[0]}
		} else {
			m.next++
			ips = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 4, byte(m.next)})}
		}
		err := s.AddIPv4(id, ips)
		_, known := m.device[id]
		if !known || m.inPool(ips[0]) {
			if err == nil {
				t.Fatalf("%s: AddIPv4(%s, %s) succeeded (ENI known %v, already in the pool %v)", m.step, id, ips[0], known, m.inPool(ips[0]))
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: AddIPv4(%s, %s): %v", m.step, id, ips[0], err)
		}
		m.owner[ips[0]] = id
		m.taken = slices.DeleteFunc(m.taken, func(ip netip.Addr) bool { return ip == ips[0] })
	case 9: // prefixes go back to EC2, or come back
		id := fzENIIDs[arg&3]
		if arg&4 != 0 && len(m.takenPfx) > 0 {
			id = fzPoolENIs[arg&3]
			p := m.takenPfx[0]
			err := s.AddIPv4Prefixes(id, []netip.Prefix{p})
			if _, known := m.device[id]; !known {
				if err == nil {
					t.Fatalf("%s: AddIPv4Prefixes to unknown %s", m.step, id)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: AddIPv4Prefixes(%s, %s): %v", m.step, id, p, err)
			}
			m.prefixes[p] = id
			for _, ip := range prefixAddrs(p) {
				m.owner[ip] = id
			}
			m.takenPfx = m.takenPfx[1:]
			return
		}
		got, err := s.TakeFreePrefixes(id, int(arg>>3)&3)
		if _, known := m.device[id]; !known {
			if err == nil {
				t.Fatalf("%s: TakeFreePrefixes of unknown %s", m.step, id)
			}
			return
		}
		for _, p := range got {
			if m.prefixes[p] != id {
				t.Fatalf("%s: TakeFreePrefixes(%s) took %s, which is %q's", m.step, id, p, m.prefixes[p])
			}
			for _, ip := range prefixAddrs(p) {
				if !m.usable(ip, now) {
					t.Fatalf("%s: TakeFreePrefixes(%s) took %s with %s held or cooling", m.step, id, p, ip)
				}
				delete(m.owner, ip)
			}
			delete(m.prefixes, p)
			m.takenPfx = append(m.takenPfx, p)
		}
	case 10: // the warm pool frees an ENI, or attaches eni-3
		if arg&4 != 0 {
			// 10.0.4.1 is also the first fresh address AddIPv4 hands
			// another ENI: EC2 never does that, but the store must then
			// refuse the ENI, not keep half of it.
			e := cloud.ENI{ID: "eni-3", DeviceNumber: 3, IPv4: addrs("10.0.5.1", "10.0.4.1")}
			err := s.AddENI(e)
			_, dup := m.device["eni-3"]
			if dup || slices.ContainsFunc(e.IPv4, m.inPool) {
				if err == nil {
					t.Fatalf("%s: AddENI of a present ENI or address", m.step)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: AddENI: %v", m.step, err)
			}
			m.device["eni-3"] = 3
			for _, ip := range e.IPv4 {
				m.owner[ip] = "eni-3"
			}
			return
		}
		id := fzENIIDs[arg&3]
		_, err := s.RemoveENI(id)
		if _, known := m.device[id]; !known {
			if !errors.Is(err, ErrUnknownENI) {
				t.Fatalf("%s: RemoveENI of unknown %s: %v", m.step, id, err)
			}
			return
		}
		busy := false
		for ip, owner := range m.owner {
			busy = busy || (owner == id && !m.usable(ip, now))
		}
		for _, ip := range m.held {
			busy = busy || (id == "eni-0" && m.inV6Pool(ip))
		}
		if busy != errors.Is(err, ErrENIInUse) || (!busy && err != nil) {
			t.Fatalf("%s: RemoveENI(%s) with addresses in use %v: %v", m.step, id, busy, err)
		}
		if err != nil {
			return
		}
		for ip, owner := range m.owner {
			if owner == id {
				delete(m.owner, ip)
				delete(m.released, ip)
			}
		}
		for p, owner := range m.prefixes {
			if owner == id {
				delete(m.prefixes, p)
			}
		}
		delete(m.device, id)
		if id == "eni-0" {
			m.v6 = false
		}
	case 11: // Restore one allocation (checkpoint, or rebuilt from the kernel)
		ip := fzRestoreIPs[int(arg>>3)%len(fzRestoreIPs)]
		meta := Meta{}
		if k.Recovered() {
			meta = fzRecovered
		}
		kept, dropped := s.Restore([]Allocation{{Key: k, Meta: meta, IP: ip, DeviceNumber: 7, RouteTable: 99}})
		_, keyHeld := m.held[k]
		_, ipHeld := m.holder(ip)
		ok := k.valid() && !keyHeld && ip.IsValid() && !ipHeld && m.inPool(ip)
		if ok != (len(kept) == 1) || len(kept)+len(dropped) != 1 {
			t.Fatalf("%s: Restore of %v at %s: kept %v, dropped %v (want kept: %v)", m.step, k, ip, kept, dropped, ok)
		}
		if ok {
			// The device and table are today's, not the checkpoint's.
			if a := kept[0]; (m.owner[ip] != "" && a.DeviceNumber != m.device[m.owner[ip]]) || a.RouteTable != RouteTable(a.DeviceNumber) {
				t.Fatalf("%s: restored %s with device %d table %d", m.step, ip, a.DeviceNumber, a.RouteTable)
			}
			m.held[k] = ip
			delete(m.released, ip)
		}
	}
}

func (m *fzModel) inSomePrefix(ip netip.Addr) bool {
	for p := range m.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// check: the store's invariants, and its state is the model's.
func (m *fzModel) check(t *testing.T, s *Store, now time.Time) {
	t.Helper()
	allocs := s.Allocations()
	st := s.Stats()
	if st.Assigned != len(allocs) || len(allocs) != len(m.held) {
		t.Fatalf("%s: Stats().Assigned %d, %d allocations, model %d", m.step, st.Assigned, len(allocs), len(m.held))
	}
	if st.Total != len(m.owner) {
		t.Fatalf("%s: pool of %d IPv4 addresses, model %d", m.step, st.Total, len(m.owner))
	}
	byIP := map[netip.Addr]Key{}
	for _, a := range allocs {
		if k, dup := byIP[a.IP]; dup {
			t.Fatalf("%s: %s held by %v and %v", m.step, a.IP, k, a.Key)
		}
		byIP[a.IP] = a.Key
		if want, ok := m.held[a.Key]; !ok || want != a.IP {
			t.Fatalf("%s: %v holds %s, model %s (%v)", m.step, a.Key, a.IP, want, ok)
		}
		if !s.IsPodAddress(a.IP) {
			t.Fatalf("%s: %v holds %s, not a pool address", m.step, a.Key, a.IP)
		}
		if h, ok := s.HolderOf(a.IP); !ok || h.Key != a.Key {
			t.Fatalf("%s: HolderOf(%s) = %v %v, Allocations says %v", m.step, a.IP, h.Key, ok, a.Key)
		}
		if l, ok := s.Lookup(a.Key); !ok || l.IP != a.IP {
			t.Fatalf("%s: Lookup(%v) = %s %v, Allocations says %s", m.step, a.Key, l.IP, ok, a.IP)
		}
	}
	// The ENIs are the model's: a failed AddENI or RemoveENI changes
	// nothing.
	enis := map[string]int{}
	for _, e := range s.ENIs() {
		enis[e.ID] = e.Device
	}
	if !maps.Equal(enis, m.device) {
		t.Fatalf("%s: the store has ENIs %v, model %v", m.step, enis, m.device)
	}
	if s.IsPodAddress(fzTrunkAddr) {
		t.Fatalf("%s: the trunk ENI's %s is a pod address", m.step, fzTrunkAddr)
	}
	// Every pool address is in exactly one state. An address the store
	// calls neither free nor cooling nor held by an allocation is out of
	// the pool for good.
	for ip := range m.owner {
		_, held := byIP[ip]
		free, cooling := s.IsFree(ip), s.IsCooling(ip)
		n := 0
		for _, b := range []bool{held, free, cooling} {
			if b {
				n++
			}
		}
		if n != 1 {
			h, hok := s.HolderOf(ip)
			t.Fatalf("%s: %s is held %v, free %v, cooling %v (HolderOf: %v %v)", m.step, ip, held, free, cooling, h.Key, hok)
		}
		if !s.IsPodAddress(ip) {
			t.Fatalf("%s: pool address %s is not a pod address", m.step, ip)
		}
		if !held && cooling != m.cooling(ip, now) {
			t.Fatalf("%s: %s cooling %v, model %v", m.step, ip, cooling, m.cooling(ip, now))
		}
	}
}
