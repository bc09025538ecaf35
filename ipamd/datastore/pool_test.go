package datastore

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ownership"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// bare is a store over a primary ENI with the given secondary addresses.
func bare(t *testing.T, c *clock, cooldown time.Duration, ips ...string) *Store {
	t.Helper()
	inst := cloud.Instance{ENIs: []cloud.ENI{{ID: "eni-0", DeviceNumber: 0, IPv4: addrs(ips...)}}}
	s, err := NewWithOptions(inst, Options{Cooldown: cooldown, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCooldown: a released address rests for the cooldown before anyone
// gets it again, even when it is the only one; it counts as cooling, not
// available, meanwhile.
func TestCooldown(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, 30*time.Second, "10.0.1.11", "10.0.1.12")
	a := mustAssign(t, s, key(1), -1)
	if _, err := s.Release(key(1), Meta{}); err != nil {
		t.Fatal(err)
	}
	if !s.IsCooling(a.IP) || s.IsFree(a.IP) {
		t.Fatal("a just-released address is not cooling")
	}
	if st := s.Stats(); st.Cooling != 1 || st.Available() != 1 {
		t.Fatalf("stats %+v", st)
	}
	b := mustAssign(t, s, key(2), -1)
	if b.IP == a.IP {
		t.Fatalf("%s handed out again during its cooldown", a.IP)
	}
	if _, err := s.Assign(key(3), Meta{}, IPv4, -1); !errors.Is(err, ErrNoAvailableIP) {
		t.Fatalf("third pod during the cooldown: %v", err)
	}
	c.Advance(30 * time.Second)
	if got := mustAssign(t, s, key(3), -1); got.IP != a.IP {
		t.Fatalf("after the cooldown got %s, want %s", got.IP, a.IP)
	}
}

// TestPoolGrowsAndShrinks: addresses and ENIs come and go; what is held or
// cooling never leaves.
func TestPoolGrowsAndShrinks(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, 30*time.Second, "10.0.1.11")
	if err := s.AddENI(cloud.ENI{ID: "eni-1", DeviceNumber: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddIPv4("eni-1", addrs("10.0.1.21", "10.0.1.22", "10.0.1.23")); err != nil {
		t.Fatal(err)
	}
	if err := s.AddIPv4("eni-1", addrs("10.0.1.11")); err == nil {
		t.Fatal("an address on two ENIs")
	}
	if err := s.AddIPv4("eni-9", addrs("10.0.1.99")); !errors.Is(err, ErrUnknownENI) {
		t.Fatalf("unknown ENI: %v", err)
	}
	held := mustAssign(t, s, key(1), 1)
	if held.IP != netip.MustParseAddr("10.0.1.21") || held.RouteTable != 2 {
		t.Fatalf("held %+v", held)
	}
	mustAssign(t, s, key(2), 1)
	s.Release(key(2), Meta{}) // 10.0.1.22 cools
	if _, err := s.RemoveENI("eni-1"); !errors.Is(err, ErrENIInUse) {
		t.Fatalf("remove an ENI with a pod: %v", err)
	}
	took, err := s.TakeFreeIPv4("eni-1", 5)
	if err != nil || !slices.Equal(took, addrs("10.0.1.23")) {
		t.Fatalf("take free: %v %v (only the rested, unheld one may go)", took, err)
	}
	s.Release(key(1), Meta{})
	if _, err := s.RemoveENI("eni-1"); !errors.Is(err, ErrENIInUse) {
		t.Fatalf("remove an ENI with cooling addresses: %v", err)
	}
	c.Advance(31 * time.Second)
	gone, err := s.RemoveENI("eni-1")
	if err != nil || len(gone.IPv4) != 2 {
		t.Fatalf("remove a rested ENI: %+v %v", gone, err)
	}
	if st := s.Stats(); st.ENIs != 1 || st.Total != 1 {
		t.Fatalf("stats after removal %+v", st)
	}
	if s.IsPodAddress(netip.MustParseAddr("10.0.1.21")) {
		t.Fatal("a removed ENI's address is still the pool's")
	}
}

// TestPrefixes: a /28 hands out its sixteen addresses after the ENI's
// secondary ones, and goes back whole only when none is busy.
func TestPrefixes(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, 0)
	p := netip.MustParsePrefix("10.0.1.32/28")
	if err := s.AddIPv4Prefixes("eni-0", []netip.Prefix{netip.MustParsePrefix("10.0.1.33/28")}); err == nil {
		t.Fatal("an unmasked prefix accepted")
	}
	if err := s.AddIPv4Prefixes("eni-0", []netip.Prefix{p}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Total != 16 || st.Prefixes != 1 {
		t.Fatalf("stats %+v", st)
	}
	a := mustAssign(t, s, key(1), -1)
	if a.IP != p.Addr() {
		t.Fatalf("first address %s", a.IP)
	}
	if got, _ := s.TakeFreePrefixes("eni-0", 1); len(got) != 0 {
		t.Fatal("a prefix with a pod went back")
	}
	s.Release(key(1), Meta{})
	if got, _ := s.TakeFreePrefixes("eni-0", 1); !slices.Equal(got, []netip.Prefix{p}) {
		t.Fatalf("free prefix not returned: %v", got)
	}
	if s.Stats().Total != 0 {
		t.Fatal("the prefix's addresses stayed")
	}
}

// TestRestore: allocations come back on the ENI that has the address now;
// those whose address left the instance, or that clash, are dropped with
// the reason.
func TestRestore(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, 0, "10.0.1.11", "10.0.1.12")
	since := c.Now().Add(-time.Hour)
	in := []Allocation{
		{Key: key(1), IP: netip.MustParseAddr("10.0.1.12"), DeviceNumber: 7, Since: since},
		{Key: key(2), IP: netip.MustParseAddr("10.0.9.9")},
		{Key: key(3), IP: netip.MustParseAddr("10.0.1.12")},
		{Key: Key{ContainerID: "x"}, IP: netip.MustParseAddr("10.0.1.11")},
	}
	kept, dropped := s.Restore(in)
	if len(kept) != 1 || kept[0].DeviceNumber != 0 || kept[0].RouteTable != TableMain || !kept[0].Since.Equal(since) {
		t.Fatalf("kept %+v", kept)
	}
	var reasons []string
	for _, d := range dropped {
		reasons = append(reasons, d.Reason)
	}
	want := []string{"address is on no ENI of this instance any more", "address already held by c1/eth0", "incomplete key"}
	if !slices.Equal(reasons, want) {
		t.Fatalf("dropped %q, want %q", reasons, want)
	}
	if got := mustAssign(t, s, key(4), -1); got.IP != netip.MustParseAddr("10.0.1.11") {
		t.Fatalf("a restored address handed out again: %s", got.IP)
	}
}

// TestRecoveredRelease: an allocation rebuilt from the kernel is keyed by
// the host veth; only a sandbox of the pod that names that veth's ifindex
// (the peer of its container interface) releases it. A sandbox of the same
// pod that cannot (containerD's second DEL of an old sandbox, with no
// netns) or names another veth is refused, and the address stays held.
func TestRecoveredRelease(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, 0, "10.0.1.11")
	veth := ownership.HostVeth(ownership.DefaultVethPrefix, "default", "web-0")
	s.Restore([]Allocation{{Key: RecoveredKey(veth), IP: netip.MustParseAddr("10.0.1.11"), Meta: Meta{HostVethIndex: 7}}})
	if _, err := s.Assign(RecoveredKey("eni0123"), Meta{}, IPv4, -1); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a caller took a recovered key: %v", err)
	}
	if _, err := s.Release(key(1), Meta{PodNamespace: "default", PodName: "web-1", HostVethIndex: 7}); !errors.Is(err, ErrUnknownPod) {
		t.Fatalf("another pod's DEL released it: %v", err)
	}
	for _, claimed := range []int{0, 8} {
		_, err := s.Release(key(1), Meta{PodNamespace: "default", PodName: "web-0", HostVethIndex: claimed})
		var refused *NotOwnerError
		if !errors.As(err, &refused) || !errors.Is(err, ErrUnknownPod) || refused.Held.IP != netip.MustParseAddr("10.0.1.11") {
			t.Fatalf("a sandbox of the pod naming ifindex %d: %v, want a refusal", claimed, err)
		}
		if _, held := s.HolderOf(netip.MustParseAddr("10.0.1.11")); !held {
			t.Fatalf("a refused release (ifindex %d) freed the address", claimed)
		}
	}
	a, err := s.Release(key(1), Meta{PodNamespace: "default", PodName: "web-0", HostVethIndex: 7})
	if err != nil || a.IP != netip.MustParseAddr("10.0.1.11") {
		t.Fatalf("the owning sandbox's DEL: %+v %v", a, err)
	}
}

// TestUndoAndReinstate: the two take-backs of a failed checkpoint write.
func TestUndoAndReinstate(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, time.Minute, "10.0.1.11")
	a := mustAssign(t, s, key(1), -1)
	s.Undo(a)
	if !s.IsFree(a.IP) {
		t.Fatal("an undone assignment left the address busy or cooling")
	}
	a = mustAssign(t, s, key(1), -1)
	r, _ := s.Release(key(1), Meta{})
	if err := s.Reinstate(r); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Lookup(key(1)); !ok || got.IP != a.IP {
		t.Fatal("reinstated allocation not found")
	}
	if err := s.Reinstate(r); err == nil {
		t.Fatal("reinstated over a holder")
	}
}

// TestGiveBack: an address EC2 moves elsewhere leaves the pool and is
// never handed out again; a held one is refused.
func TestGiveBack(t *testing.T) {
	c := fixedClock()
	s := bare(t, c, time.Minute, "10.0.1.11", "10.0.1.12")
	a := mustAssign(t, s, key(1), -1)
	if err := s.GiveBack(a.IP); err == nil {
		t.Fatal("a held address was given back")
	}
	if _, err := s.Release(key(1), Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := s.GiveBack(a.IP); err != nil {
		t.Fatalf("a cooling address: %v", err)
	}
	c.Advance(time.Hour)
	for i := 2; i < 4; i++ {
		if got, err := s.Assign(key(i), Meta{}, IPv4, -1); err == nil && got.IP == a.IP {
			t.Fatalf("a given-back address was handed out: %v", got)
		}
	}
	if s.IsPodAddress(a.IP) {
		t.Fatal("a given-back address is still a pod address")
	}
}
