// Package datastore is ipamd's allocator: the pool of pod addresses per
// ENI and which pod holds each. An allocation is keyed by (network name,
// container ID, interface name), the triple the CNI spec makes unique per
// attachment, so a retried ADD finds its address again.
//
// The pool changes while ipamd runs (the warm-pool manager attaches ENIs,
// adds and gives back addresses and /28 prefixes); a released address
// cools down before it is handed out again (IP_COOLDOWN_PERIOD), so a late
// packet or a late DEL for the old pod cannot hit the new one. The store
// does no I/O: ipamd persists Allocations to its checkpoint after every
// change and feeds them back through Restore on start.
package datastore

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ownership"
)

// ErrUnknownPod is returned by Release for a key that holds nothing. Its
// text is exactly the reference's, which the reference's plugin looks for
// as a substring of the gRPC error: do not reword it.
var ErrUnknownPod = errors.New("datastore: unknown pod")

// ErrNoAvailableIP means every address of the pool is held or cooling.
var ErrNoAvailableIP = errors.New("datastore: no available IP addresses")

// ErrInvalidKey means a key with an empty field: such a key cannot be told
// apart from another pod's, so it never gets an address.
var ErrInvalidKey = errors.New("datastore: network name, container ID and interface name are all required")

// ErrUnsupportedFamily is returned for a family the pool has no addresses
// of yet (IPv6 comes with prefix delegation).
var ErrUnsupportedFamily = errors.New("datastore: address family not supported")

// ErrENIInUse means an ENI still has assigned or cooling addresses.
var ErrENIInUse = errors.New("datastore: ENI has assigned or cooling addresses")

// ErrUnknownENI names an ENI the store does not have.
var ErrUnknownENI = errors.New("datastore: unknown ENI")

// TableMain is the route table of the primary ENI's addresses.
const TableMain = 254

// DefaultCooldown is the reference's IP_COOLDOWN_PERIOD default.
const DefaultCooldown = 30 * time.Second

// RecoveredNetwork marks an allocation rebuilt from the kernel's own
// objects (a corrupt or lost checkpoint): its ContainerID is the host
// veth's name, and only a DEL whose sandbox proves it owns that veth
// releases it (see Release).
const RecoveredNetwork = "_recovered-from-kernel"

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
// reference's checkpoint (vpc-cni-ipam/1).
type Key struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// valid: every field set, and no control character (a NUL or newline is
// in no CNI name; it would make two keys print alike, and ipamd encodes
// keys with NUL separators where it must round-trip them).
func (k Key) valid() bool {
	for _, f := range []string{k.NetworkName, k.ContainerID, k.IfName} {
		if f == "" || strings.ContainsFunc(f, unicode.IsControl) {
			return false
		}
	}
	return true
}

// Recovered reports whether the key is one Restore made from the kernel.
func (k Key) Recovered() bool { return k.NetworkName == RecoveredNetwork }

// Meta describes the pod holding an allocation, or, in a Release, the
// sandbox asking. The key alone decides who holds an assigned address;
// Meta serves the logs, the reconciler, GC, and the one case the key
// cannot decide: an allocation recovered from the kernel.
type Meta struct {
	PodNamespace string
	PodName      string
	// Netns is the pod namespace the sandbox's ADD named: GC finds the
	// sandbox's host veth through it.
	Netns string
	// HostVethIndex is, in an allocation recovered from the kernel, the
	// ifindex of the host veth it was recovered from; in a Release, the
	// ifindex of the host veth that is the peer of the asking sandbox's
	// container interface (0: the sandbox could not say).
	HostVethIndex int
}

// Allocation is one assigned address and where it lives.
type Allocation struct {
	Key          Key
	Meta         Meta
	IP           netip.Addr
	DeviceNumber int       // the ENI's device number
	RouteTable   int       // the ENI's route table, see RouteTable
	Since        time.Time // when it was assigned
	// Releasing: the pod is torn down but for its veth pair, which its DEL
	// handed to ipamd (HandOver; Meta.HostVethIndex names the host end).
	// The address stays held until that veth is gone (Finish).
	Releasing bool
}

// RouteTable is the table a pod's "from" rule uses for an ENI's addresses,
// as the reference does (docs/reference-facts.md#rule-priorities-and-tables): main for the primary ENI,
// device+1 for a secondary one.
func RouteTable(device int) int {
	if device == 0 {
		return TableMain
	}
	return device + 1
}

// MaxIPv6PerPrefix bounds what ipamd hands out of one delegated prefix: far
// more than a node's pods, and it keeps "lowest free" a short scan.
const MaxIPv6PerPrefix = 4096

// Options tune a Store.
type Options struct {
	// Cooldown is how long a released address rests before it is handed
	// out again. Zero means none.
	Cooldown time.Duration
	// Now is the clock (the scenario harness's is simulated); nil is
	// time.Now.
	Now func() time.Time
}

// Store is the allocator. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	opt     Options
	enis    []*eni              // sorted by device number
	allocs  map[Key]Allocation  // the state proper
	holder  map[netip.Addr]Key  // index of allocs by address
	owner   map[netip.Addr]*eni // every IPv4 pool address and its ENI
	cooling map[netip.Addr]time.Time
	// changes counts writes to allocs (AllocationsVersion); poolChanges
	// the ENIs and addresses added to or taken from the pool (Version).
	changes, poolChanges uint64
	// releasing caches AnyReleasing's answer at allocs' version
	// releasingAt-1 (0: not known).
	releasingAt uint64
	releasing   bool
}

// New builds a store over the instance's ENIs with every address free and
// no cooldown.
func New(inst cloud.Instance) (*Store, error) { return NewWithOptions(inst, Options{}) }

// NewWithOptions builds a store over the instance's ENIs. It refuses an
// inventory that would let one address be handed out twice (two ENIs with
// one device number, an address on two ENIs).
func NewWithOptions(inst cloud.Instance, opt Options) (*Store, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Store{opt: opt, allocs: map[Key]Allocation{}, holder: map[netip.Addr]Key{},
		owner: map[netip.Addr]*eni{}, cooling: map[netip.Addr]time.Time{}}
	for _, e := range inst.ENIs {
		if err := s.addENI(e); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Assign gives key an address of the family. A key that already holds one
// gets the same allocation back whatever the other arguments (a retried
// ADD must not take a second address). Otherwise the choice is
// deterministic: the lowest free, rested address of preferDevice if that
// ENI has one, else of the lowest-numbered ENI that has one.
// preferDevice < 0 means no preference. An exhausted pool is
// ErrNoAvailableIP.
func (s *Store) Assign(key Key, meta Meta, family Family, preferDevice int) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.allocs[key]; ok {
		return a, nil
	}
	if !key.valid() || key.Recovered() {
		return Allocation{}, ErrInvalidKey
	}
	now := s.opt.Now()
	switch family {
	case IPv4:
	case IPv6:
		// IPv6 needs prefix delegation, as in the reference: addresses come
		// from the delegated prefixes (the primary ENI's), in order.
		for _, e := range s.enis {
			for _, pfx := range e.ipv6 {
				if ip, ok := s.lowestFreeIn(pfx, now); ok {
					return s.hold(key, meta, e.device, ip, now), nil
				}
			}
		}
		return Allocation{}, ErrNoAvailableIP
	default:
		return Allocation{}, fmt.Errorf("%w: %s", ErrUnsupportedFamily, family)
	}
	if preferDevice >= 0 {
		for _, e := range s.enis {
			if e.device == preferDevice {
				if ip, ok := s.lowestFree(e, now); ok {
					return s.hold(key, meta, e.device, ip, now), nil
				}
			}
		}
	}
	for _, e := range s.enis {
		if ip, ok := s.lowestFree(e, now); ok {
			return s.hold(key, meta, e.device, ip, now), nil
		}
	}
	return Allocation{}, ErrNoAvailableIP
}

// usable: in the pool, not held, rested.
func (s *Store) usable(ip netip.Addr, now time.Time) bool {
	if _, held := s.holder[ip]; held {
		return false
	}
	return !s.coolingAt(ip, now)
}

func (s *Store) coolingAt(ip netip.Addr, now time.Time) bool {
	t, ok := s.cooling[ip]
	if !ok {
		return false
	}
	if now.Sub(t) < s.opt.Cooldown {
		return true
	}
	delete(s.cooling, ip) // rested: forget it
	return false
}

func (s *Store) lowestFree(e *eni, now time.Time) (netip.Addr, bool) {
	for _, ip := range e.ipv4Addrs() {
		if s.usable(ip, now) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// lowestFreeIn scans a delegated prefix from its first host address.
func (s *Store) lowestFreeIn(pfx netip.Prefix, now time.Time) (netip.Addr, bool) {
	ip := pfx.Addr().Next()
	for i := 0; i < MaxIPv6PerPrefix && pfx.Contains(ip); i++ {
		if s.usable(ip, now) {
			return ip, true
		}
		ip = ip.Next()
	}
	return netip.Addr{}, false
}

// inIPv6Pool reports whether ip is one an IPv6 prefix would hand out, and
// the ENI of that prefix.
func (s *Store) inIPv6Pool(ip netip.Addr) (*eni, bool) {
	for _, e := range s.enis {
		for _, pfx := range e.ipv6 {
			if pfx.Contains(ip) && ip != pfx.Addr() {
				return e, true
			}
		}
	}
	return nil, false
}

// eniOf is the ENI an address of the pool belongs to.
func (s *Store) eniOf(ip netip.Addr) (*eni, bool) {
	if e, ok := s.owner[ip]; ok {
		return e, true
	}
	return s.inIPv6Pool(ip)
}

func (s *Store) hold(key Key, meta Meta, device int, ip netip.Addr, now time.Time) Allocation {
	a := Allocation{Key: key, Meta: meta, IP: ip, DeviceNumber: device, RouteTable: RouteTable(device), Since: now}
	s.allocs[key] = a
	s.holder[ip] = key
	delete(s.cooling, ip)
	s.changes++
	return a
}

// Release frees an address for its owner only, starts its cooldown, and
// returns the allocation it was, so the caller can tear the pod down from
// it. The owner is the sandbox the key names. An allocation recovered from
// the kernel names no sandbox, only a host veth: it is released to a
// sandbox of that pod (meta's name hash) that proves it owns that very
// veth (meta.HostVethIndex, the peer of its container interface, equal to
// the one recorded at recovery). A same-named veth is not proof: a pod
// recreated with the same name gets one, and a late DEL of its old sandbox
// must not free the new sandbox's address.
//
// A key that holds nothing is ErrUnknownPod; a recovered allocation of the
// pod that the sandbox could not prove it owns is a *NotOwnerError, which
// is also ErrUnknownPod (nothing was released for this sandbox).
func (s *Store) Release(key Key, meta Meta) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.owned(key, meta)
	if err != nil {
		return Allocation{}, err
	}
	if a.Releasing {
		// Handed over already: the address goes once its veth is gone,
		// not before (a runtime's second DEL must not hurry it).
		return a, nil
	}
	s.drop(a)
	s.cooling[a.IP] = s.opt.Now()
	return a, nil
}

// Owned is what Release(key, meta) would free, freeing nothing: a DEL asks
// it first, tears that down, and only then releases.
func (s *Store) Owned(key Key, meta Meta) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owned(key, meta)
}

func (s *Store) owned(key Key, meta Meta) (Allocation, error) {
	if a, ok := s.allocs[key]; ok {
		return a, nil
	}
	rec, found := s.recoveredFor(meta)
	if !found {
		return Allocation{}, ErrUnknownPod
	}
	if meta.HostVethIndex == 0 || meta.HostVethIndex != rec.Meta.HostVethIndex {
		return Allocation{}, &NotOwnerError{Held: rec, Claimed: meta.HostVethIndex}
	}
	return rec, nil
}

// NotOwnerError is a release refused: the pod has an allocation recovered
// from the kernel, and the asking sandbox did not prove it owns the host
// veth the allocation was recovered from.
type NotOwnerError struct {
	Held    Allocation // the recovered allocation, still held
	Claimed int        // the host veth ifindex the sandbox gave (0: none)
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("datastore: %s is held by host veth %s (ifindex %d, recovered from the kernel); the asking sandbox named ifindex %d",
		e.Held.IP, e.Held.Key.ContainerID, e.Held.Meta.HostVethIndex, e.Claimed)
}

// Is makes a refusal read as ErrUnknownPod: nothing is released for the
// asking sandbox, and the reference's plugin knows that answer.
func (e *NotOwnerError) Is(target error) bool { return target == ErrUnknownPod }

// recoveredFor finds the recovered allocation of the pod meta names.
func (s *Store) recoveredFor(meta Meta) (Allocation, bool) {
	if meta.PodNamespace == "" || meta.PodName == "" {
		return Allocation{}, false
	}
	suffix := ownership.PodSuffix(meta.PodNamespace, meta.PodName, 0)
	for k, a := range s.allocs {
		if k.Recovered() && strings.HasSuffix(k.ContainerID, suffix) {
			return a, true
		}
	}
	return Allocation{}, false
}

// HandOver marks what Release(key, meta) would free as Releasing, freeing
// nothing: the pod's DEL has torn down everything but its veth pair, whose
// host end meta.HostVethIndex names, and leaves that to ipamd. The
// address is held until Finish. Handing over twice is the same.
func (s *Store) HandOver(key Key, meta Meta) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if meta.HostVethIndex <= 0 {
		return Allocation{}, fmt.Errorf("datastore: a hand-over names the host veth's ifindex, got %d", meta.HostVethIndex)
	}
	a, err := s.owned(key, meta)
	if err != nil {
		return Allocation{}, err
	}
	prev := a
	a.Releasing, a.Meta.HostVethIndex = true, meta.HostVethIndex
	s.allocs[a.Key] = a
	s.changes++
	return prev, nil
}

// UndoHandOver puts back an allocation as it was before a HandOver whose
// checkpoint write failed (prev is what HandOver returned).
func (s *Store) UndoHandOver(prev Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.allocs[prev.Key]; ok && cur.IP == prev.IP {
		s.allocs[prev.Key] = prev
		s.changes++
	}
}

// Releasing lists the allocations handed over and not yet finished.
func (s *Store) Releasing() []Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Allocation
	for _, a := range s.allocs {
		if a.Releasing {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Allocation) int { return a.IP.Compare(b.IP) })
	return out
}

// AnyReleasing reports whether Releasing would list anything, without
// listing: ipamd asks on every tick whether its reaper has work, and the
// answer only changes with the allocations.
func (s *Store) AnyReleasing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.releasingAt != s.changes+1 {
		s.releasing = false
		for _, a := range s.allocs {
			if a.Releasing {
				s.releasing = true
				break
			}
		}
		s.releasingAt = s.changes + 1
	}
	return s.releasing
}

// Finish releases, with a cooldown, an allocation handed over whose veth
// is gone. It does nothing (false) unless a is still held, and still
// Releasing, by the same key.
func (s *Store) Finish(a Allocation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.allocs[a.Key]
	if !ok || cur.IP != a.IP || !cur.Releasing {
		return false
	}
	s.drop(cur)
	s.cooling[cur.IP] = s.opt.Now()
	return true
}

func (s *Store) drop(a Allocation) {
	delete(s.allocs, a.Key)
	delete(s.holder, a.IP)
	s.changes++
}

// ReleaseKey frees an allocation by its exact key with a cooldown (the
// reconciler's release of a pod that is gone).
func (s *Store) ReleaseKey(key Key) (Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocs[key]
	if !ok {
		return Allocation{}, ErrUnknownPod
	}
	s.drop(a)
	s.cooling[a.IP] = s.opt.Now()
	return a, nil
}

// Undo takes back an Assign whose checkpoint write failed: the address is
// free again at once (nobody ever used it).
func (s *Store) Undo(a Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.allocs[a.Key]; ok && cur.IP == a.IP {
		s.drop(cur)
	}
}

// Reinstate puts back an allocation whose release could not be persisted,
// so the retried DEL finds it. It fails if the address was taken meanwhile.
func (s *Store) Reinstate(a Allocation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.holder[a.IP]; held {
		return fmt.Errorf("datastore: %s was taken again", a.IP)
	}
	if cur, ok := s.allocs[a.Key]; ok {
		// A retried ADD of the key got another address meanwhile: that
		// one is the key's now.
		return fmt.Errorf("datastore: %s/%s holds %s now", a.Key.ContainerID, a.Key.IfName, cur.IP)
	}
	if _, ok := s.eniOf(a.IP); !ok {
		return fmt.Errorf("datastore: %s is no longer in the pool", a.IP)
	}
	s.allocs[a.Key] = a
	s.holder[a.IP] = a.Key
	delete(s.cooling, a.IP)
	s.changes++
	return nil
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

// AllocationsVersion counts the changes to the allocations: while it
// stays the same, Allocations returns the same list, so a caller that
// watches them (a checker after every step) need not copy them again.
func (s *Store) AllocationsVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

// Version counts every change to the store, its allocations and its
// pool alike: while it stays the same, only time can change what the
// store answers, and only by ending a cooldown (CooldownEnds). The warm
// pool uses it to know when its next pass has nothing to do.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes + s.poolChanges
}

// CooldownEnds is when the first address still cooling down rests, false
// when none is cooling.
func (s *Store) CooldownEnds() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	var first time.Time
	for ip, t := range s.cooling {
		if s.coolingAt(ip, now) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if first.IsZero() {
		return time.Time{}, false
	}
	return first.Add(s.opt.Cooldown), true
}

// IsFree reports whether ip belongs to the pool, no pod holds it and it is
// not cooling down.
func (s *Store) IsFree(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, in := s.eniOf(ip)
	return in && s.usable(ip, s.opt.Now())
}

// IsPodAddress reports whether ip is one the pool hands to pods.
func (s *Store) IsPodAddress(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, in := s.eniOf(ip)
	return in
}

// CoolingSince maps each address still cooling down to when it was
// released.
func (s *Store) CoolingSince() map[netip.Addr]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	out := make(map[netip.Addr]time.Time, len(s.cooling))
	for ip, t := range s.cooling {
		if s.coolingAt(ip, now) {
			out[ip] = t
		}
	}
	return out
}

// IsCooling reports whether ip was released less than the cooldown ago.
func (s *Store) IsCooling(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coolingAt(ip, s.opt.Now())
}
