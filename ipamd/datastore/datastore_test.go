package datastore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
)

func store(t *testing.T, typ string) *Store {
	t.Helper()
	c, err := memory.New(typ)
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := c.Instance(context.Background())
	s, err := NewWithOptions(inst, Options{Now: fixedClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clock is a settable clock for cooldown tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func fixedClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func key(i int) Key {
	return Key{NetworkName: "aws-cni", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
}

func mustAssign(t *testing.T, s *Store, k Key, prefer int) Allocation {
	t.Helper()
	a, err := s.Assign(k, Meta{PodNamespace: "default", PodName: k.ContainerID}, IPv4, prefer)
	if err != nil {
		t.Fatalf("assign %v: %v", k, err)
	}
	return a
}

func TestAssignIdempotent(t *testing.T) {
	s := store(t, "m5.large")
	a := mustAssign(t, s, key(1), -1)
	want := Allocation{Key: key(1), Meta: Meta{PodNamespace: "default", PodName: "c1"}, IP: netip.MustParseAddr("10.0.1.11"), DeviceNumber: 0, RouteTable: TableMain,
		Since: fixedClock().Now()}
	if a != want {
		t.Fatalf("first assign %+v", a)
	}
	// A retried ADD, even one that now asks for another device, gets the
	// same address and takes nothing more from the pool.
	again, err := s.Assign(key(1), Meta{PodName: "other"}, IPv4, 2)
	if err != nil || again != a {
		t.Fatalf("retried assign %+v %v", again, err)
	}
	if st := s.Stats(); st.Assigned != 1 {
		t.Fatalf("retry took another address: %+v", st)
	}
	if got, ok := s.Lookup(key(1)); !ok || got != a {
		t.Fatalf("lookup %+v %v", got, ok)
	}
}

func TestReleaseUnknown(t *testing.T) {
	s := store(t, "m5.large")
	_, err := s.Release(key(1), Meta{})
	if !errors.Is(err, ErrUnknownPod) || err.Error() != "datastore: unknown pod" {
		t.Fatalf("release of a never-assigned key: %v", err)
	}
	a := mustAssign(t, s, key(1), -1)
	if s.IsFree(a.IP) {
		t.Fatal("assigned address reported free")
	}
	r, err := s.Release(key(1), Meta{})
	if err != nil || r != a {
		t.Fatalf("release %+v %v", r, err)
	}
	if _, err := s.Release(key(1), Meta{}); !errors.Is(err, ErrUnknownPod) {
		t.Fatalf("second release: %v", err)
	}
	if !s.IsFree(a.IP) || s.IsFree(netip.MustParseAddr("10.0.1.10")) || s.IsFree(netip.MustParseAddr("192.0.2.1")) {
		t.Fatal("IsFree is wrong: released address, ENI primary or foreign address")
	}
}

func TestExhaustion(t *testing.T) {
	s := store(t, "t3.medium") // 3 ENIs x 5 pod addresses
	for i := range 15 {
		mustAssign(t, s, key(i), -1)
	}
	if _, err := s.Assign(key(99), Meta{}, IPv4, -1); !errors.Is(err, ErrNoAvailableIP) {
		t.Fatalf("assign on an empty pool: %v", err)
	}
	if _, err := s.Assign(key(99), Meta{}, IPv4, 1); !errors.Is(err, ErrNoAvailableIP) {
		t.Fatalf("assign on an empty pool with a preference: %v", err)
	}
	if st := s.Stats(); st != (Stats{ENIs: 3, Total: 15, TotalIPv6: MaxIPv6PerPrefix, Assigned: 15}) {
		t.Fatalf("stats %+v", st)
	}
	// Freeing one address makes exactly that one available again.
	freed, _ := s.Release(key(7), Meta{})
	if a := mustAssign(t, s, key(99), -1); a.IP != freed.IP {
		t.Fatalf("got %s, want the freed %s", a.IP, freed.IP)
	}
}

// TestDeterministic: the same sequence of calls gives the same addresses,
// in order of device then address, reusing the lowest freed address first.
func TestDeterministic(t *testing.T) {
	run := func() []Allocation {
		s := store(t, "t3.medium")
		for i := range 8 {
			mustAssign(t, s, key(i), -1)
		}
		s.Release(key(2), Meta{})
		s.Release(key(6), Meta{})
		mustAssign(t, s, key(100), -1)
		return s.Allocations()
	}
	first := run()
	var ips []string
	for _, a := range first {
		ips = append(ips, fmt.Sprintf("%s:%d/%d", a.IP, a.DeviceNumber, a.RouteTable))
	}
	want := []string{"10.0.1.11:0/254", "10.0.1.12:0/254", "10.0.1.13:0/254", "10.0.1.14:0/254", "10.0.1.15:0/254",
		"10.0.2.11:1/2", "10.0.2.13:1/2"}
	if !slices.Equal(ips, want) {
		t.Fatalf("allocations %v, want %v", ips, want)
	}
	if a := first[2]; a.Key != key(100) {
		t.Fatalf("10.0.1.13 (the lowest freed) went to %v", a.Key)
	}
	for range 5 {
		if again := run(); !reflect.DeepEqual(again, first) {
			t.Fatalf("run differs:\n%v\n%v", again, first)
		}
	}
}

func TestPreferDevice(t *testing.T) {
	s := store(t, "t3.medium")
	if a := mustAssign(t, s, key(1), 2); a.IP.String() != "10.0.3.11" || a.DeviceNumber != 2 || a.RouteTable != 3 {
		t.Fatalf("prefer 2: %+v", a)
	}
	if a := mustAssign(t, s, key(2), 7); a.DeviceNumber != 0 {
		t.Fatalf("prefer a device the instance lacks: %+v", a)
	}
	for i := 3; i < 7; i++ { // device 2 has 4 more addresses
		mustAssign(t, s, key(i), 2)
	}
	// Device 2 is full: fall through to the lowest device with room.
	if a := mustAssign(t, s, key(7), 2); a.IP.String() != "10.0.1.12" || a.DeviceNumber != 0 {
		t.Fatalf("prefer a full device: %+v", a)
	}
}

func TestRejects(t *testing.T) {
	s := store(t, "m5.large")
	for _, k := range []Key{{}, {NetworkName: "aws-cni", IfName: "eth0"}, {ContainerID: "c", IfName: "eth0"}, {NetworkName: "n", ContainerID: "c"}} {
		if _, err := s.Assign(k, Meta{}, IPv4, -1); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("key %+v: %v", k, err)
		}
	}
	if _, err := s.Assign(key(1), Meta{}, Family(5), -1); !errors.Is(err, ErrUnsupportedFamily) {
		t.Errorf("family 5: %v", err)
	}
	if st := s.Stats(); st.Assigned != 0 {
		t.Errorf("a rejected call took an address: %+v", st)
	}
	ip := netip.MustParseAddr("10.0.1.11")
	for name, inst := range map[string]cloud.Instance{
		"device twice":  {ENIs: []cloud.ENI{{DeviceNumber: 0}, {DeviceNumber: 0}}},
		"address twice": {ENIs: []cloud.ENI{{DeviceNumber: 0, IPv4: []netip.Addr{ip}}, {DeviceNumber: 1, IPv4: []netip.Addr{ip}}}},
		"not IPv4":      {ENIs: []cloud.ENI{{IPv4: []netip.Addr{netip.MustParseAddr("2600::1")}}}},
		"negative":      {ENIs: []cloud.ENI{{DeviceNumber: -1}}},
	} {
		if _, err := New(inst); err == nil {
			t.Errorf("New accepted an inventory with %s", name)
		}
	}
}

func TestRouteTable(t *testing.T) {
	for dev, want := range map[int]int{0: 254, 1: 2, 2: 3, 14: 15} {
		if got := RouteTable(dev); got != want {
			t.Errorf("RouteTable(%d) = %d, want %d", dev, got, want)
		}
	}
}

// TestConcurrentAssign: under contention (run with -race) no address is
// ever handed to two keys, and racing retries of one key share one address.
func TestConcurrentAssign(t *testing.T) {
	s := store(t, "m5.4xlarge") // 8 x 29 = 232 addresses
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[Key][]netip.Addr{}
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4 {
				k := key(g*10 + j%3) // j = 0 and 3 are the same key: a retry
				a, err := s.Assign(k, Meta{}, IPv4, g%8)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[k] = append(got[k], a.IP)
				mu.Unlock()
				if j == 1 {
					if _, err := s.Release(k, Meta{}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for k, ips := range got {
		if k.ContainerID[len(k.ContainerID)-1] == '0' && (len(ips) != 2 || ips[0] != ips[1]) {
			t.Errorf("retries of %v got %v", k, ips)
		}
	}
	seen := map[netip.Addr]Key{}
	for _, a := range s.Allocations() {
		if other, dup := seen[a.IP]; dup {
			t.Fatalf("%s held by %v and %v", a.IP, other, a.Key)
		}
		seen[a.IP] = a.Key
	}
	if len(seen) != 128 || s.Stats().Assigned != 128 {
		t.Fatalf("%d allocations (%+v), want 128", len(seen), s.Stats())
	}
}

// TestIPv6FromPrefix: /128s from the bottom of the primary ENI's delegated
// prefix, main table, released and reused like IPv4.
func TestIPv6FromPrefix(t *testing.T) {
	s := store(t, "m5.large")
	a, err := s.Assign(key(1), Meta{}, IPv6, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Assign(key(2), Meta{}, IPv6, -1)
	if a.DeviceNumber != 0 || a.RouteTable != TableMain || !a.IP.Is6() || b.IP != a.IP.Next() {
		t.Fatalf("%+v %+v", a, b)
	}
	if s.IsFree(a.IP) {
		t.Fatal("held address reported free")
	}
	s.Release(key(1), Meta{})
	if !s.IsFree(a.IP) {
		t.Fatal("released address not free")
	}
	if c, _ := s.Assign(key(3), Meta{}, IPv6, -1); c.IP != a.IP {
		t.Fatalf("lowest free not reused: %s", c.IP)
	}
}

// TestTrunkHasNoAddresses: a trunk ENI (empty, as the memory cloud builds
// it, or listing addresses by mistake) adds nothing to the pool, and its
// device number is still taken.
func TestTrunkHasNoAddresses(t *testing.T) {
	c, err := memory.NewWithOptions("m5.large", memory.Options{Trunk: true})
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := c.Instance(context.Background())
	s, err := New(inst)
	if err != nil {
		t.Fatalf("a trunk with no addresses: %v", err)
	}
	if st := s.Stats(); st.ENIs != 2 || st.Total != 18 {
		t.Fatalf("stats %+v, want 2 pod ENIs and 18 addresses", st)
	}
	for i := range 18 {
		if a := mustAssign(t, s, key(i), 2); a.DeviceNumber == 2 {
			t.Fatalf("address %s from the trunk", a.IP)
		}
	}
	if _, err := s.Assign(key(18), Meta{}, IPv4, 2); !errors.Is(err, ErrNoAvailableIP) {
		t.Fatalf("19th pod: %v", err)
	}

	stray := netip.MustParseAddr("10.0.9.11")
	listed := cloud.Instance{ENIs: []cloud.ENI{{DeviceNumber: 0}, {DeviceNumber: 1, Trunk: true, IPv4: []netip.Addr{stray}}}}
	s, err = New(listed)
	if err != nil {
		t.Fatal(err)
	}
	if s.IsFree(stray) || s.Stats().Total != 0 {
		t.Fatal("a trunk's listed address joined the pool")
	}
	twice := cloud.Instance{ENIs: []cloud.ENI{{DeviceNumber: 1, Trunk: true}, {DeviceNumber: 1}}}
	if _, err := New(twice); err == nil {
		t.Fatal("a pod ENI took the trunk's device number")
	}
}
