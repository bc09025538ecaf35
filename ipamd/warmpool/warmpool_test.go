package warmpool

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/mocks/mock_cloud"
)

// recNet records the ENIs set up and torn down.
type recNet struct{ setup, teardown []string }

func (n *recNet) Setup(e cloud.ENI) error    { n.setup = append(n.setup, e.ID); return nil }
func (n *recNet) Teardown(e cloud.ENI) error { n.teardown = append(n.teardown, e.ID); return nil }

type fixture struct {
	now   time.Time
	store *datastore.Store
	net   *recNet
	cloud *memory.Cloud
	m     *Manager
}

// fresh is a manager over a freshly launched memory-cloud instance: the
// whole real path, provider request building included.
func fresh(t *testing.T, typ string, targets Targets) *fixture {
	t.Helper()
	c, err := memory.NewWithOptions(typ, memory.Options{Bare: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), net: &recNet{}, cloud: c}
	inst, err := c.Provider().Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.store, err = datastore.NewWithOptions(inst, datastore.Options{Cooldown: 30 * time.Second, Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.m = New(f.store, c.Provider(), inst, Config{Targets: targets, Limits: inst.Limits, Now: f.clock, Net: f.net})
	return f
}

func (f *fixture) clock() time.Time { return f.now }

func (f *fixture) step(t *testing.T) string {
	t.Helper()
	a, err := f.m.Step(context.Background())
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	return a
}

func (f *fixture) assign(t *testing.T, n int) []datastore.Key {
	t.Helper()
	var keys []datastore.Key
	for i := range n {
		k := datastore.Key{NetworkName: "aws-cni", ContainerID: fmt.Sprintf("c%d-%d", len(f.store.Allocations()), i), IfName: "eth0"}
		if _, err := f.store.Assign(k, datastore.Meta{}, datastore.IPv4, -1); err != nil {
			t.Fatalf("assign %d: %v", i, err)
		}
		keys = append(keys, k)
	}
	return keys
}

// TestWarmIPTargetGrowsAndShrinks: WARM_IP_TARGET=3, MINIMUM_IP_TARGET=5
// on a fresh m5.large (9 addresses per ENI): the pool reaches 5, grows as
// pods take addresses, attaches a second ENI when the first is full, and
// gives back what is over target once pods leave, rate-limited.
func TestWarmIPTargetGrowsAndShrinks(t *testing.T) {
	f := fresh(t, "m5.large", Targets{WarmIP: 3, MinimumIP: 5})
	if a := f.step(t); a != ActionAssignIPs || f.store.Stats().Total != 5 {
		t.Fatalf("first step %q, stats %+v", a, f.store.Stats())
	}
	if a := f.step(t); a != "" {
		t.Fatalf("at target, step did %q", a)
	}
	keys := f.assign(t, 5)
	f.step(t) // short 3: fills the primary's room (4 left) with 3
	if st := f.store.Stats(); st.Total != 8 || st.Available() != 3 {
		t.Fatalf("after growth %+v", st)
	}
	keys = append(keys, f.assign(t, 3)...)
	f.step(t) // 1 slot left on the primary
	f.assign(t, 1)
	if a := f.step(t); a != ActionAllocENI {
		t.Fatalf("primary full: step did %q", a)
	}
	if len(f.net.setup) != 1 || f.store.Stats().ENIs != 2 {
		t.Fatalf("second ENI not set up: %v %+v", f.net.setup, f.store.Stats())
	}
	for _, k := range keys {
		if _, err := f.store.Release(k, datastore.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if a := f.step(t); a != "" {
		t.Fatalf("shrank cooling addresses: %q", a)
	}
	f.now = f.now.Add(31 * time.Second)
	if a := f.step(t); a != ActionUnassignIPs {
		t.Fatalf("over target after cooldown: step did %q", a)
	}
	if a := f.step(t); a != "" {
		t.Fatalf("second shrink within 30s: %q", a)
	}
}

// TestENIGranularity: WARM_ENI_TARGET=1 keeps one whole ENI's worth free;
// fully free secondary ENIs go back, the primary never.
func TestENIGranularity(t *testing.T) {
	f := fresh(t, "t3.medium", DefaultTargets()) // 5 per ENI
	f.step(t)
	if st := f.store.Stats(); st.Total != 5 {
		t.Fatalf("primary not filled: %+v", st)
	}
	keys := f.assign(t, 5)
	if a := f.step(t); a != ActionAllocENI || f.store.Stats().Total != 10 {
		t.Fatalf("step %q, %+v", a, f.store.Stats())
	}
	keys = append(keys, f.assign(t, 5)...)
	if a := f.step(t); a != ActionAllocENI {
		t.Fatalf("third ENI: %q", a)
	}
	keys = append(keys, f.assign(t, 5)...)
	if a := f.step(t); a != "" {
		t.Fatalf("past the instance's ENI limit: %q", a)
	}
	for _, k := range keys {
		f.store.Release(k, datastore.Meta{})
	}
	f.now = f.now.Add(time.Minute)
	for range 3 {
		f.step(t)
		f.now = f.now.Add(31 * time.Second)
	}
	// The primary ENI alone is one whole ENI's worth free: both
	// secondaries go back, one per 30s.
	if st := f.store.Stats(); st.ENIs != 1 || len(f.net.teardown) != 2 {
		t.Fatalf("after shrinking %+v, torn down %v", st, f.net.teardown)
	}
}

// TestFillAsReference: how much one step asks EC2 for, in the
// reference's numbers. With WARM_ENI_TARGET (the default) a new ENI comes
// with every secondary address it can hold, however few the pool is short
// of: an m5.large's ENI 9; with WARM_IP_TARGET, only what is short; with
// prefix delegation and WARM_PREFIX_TARGET=1, one /28.
func TestFillAsReference(t *testing.T) {
	f := fresh(t, "m5.large", DefaultTargets())
	f.step(t)
	if st := f.store.Stats(); st.Total != 9 {
		t.Fatalf("primary ENI: %+v, want its 9 secondary addresses", st)
	}
	f.assign(t, 2) // 7 free: 2 short of an ENI's worth
	if a := f.step(t); a != ActionAllocENI || f.store.Stats().Total != 18 {
		t.Fatalf("step %q, %+v: want a second ENI with all 9 addresses", a, f.store.Stats())
	}

	f = fresh(t, "m5.large", Targets{WarmIP: 2})
	f.step(t)
	if st := f.store.Stats(); st.Total != 2 {
		t.Fatalf("WARM_IP_TARGET=2: %+v", st)
	}

	f = fresh(t, "m5.large", Targets{WarmENI: 1, WarmPrefix: 1, PrefixDelegation: true})
	f.step(t)
	if st := f.store.Stats(); st.Prefixes != 1 || st.Total != 16 {
		t.Fatalf("WARM_PREFIX_TARGET=1: %+v, want one /28", st)
	}
}

// TestPrefixDelegation: /28s instead of addresses.
func TestPrefixDelegation(t *testing.T) {
	f := fresh(t, "m5.large", Targets{WarmIP: 20, PrefixDelegation: true})
	if a := f.step(t); a != ActionAssignPrefixes {
		t.Fatalf("step %q", a)
	}
	if st := f.store.Stats(); st.Prefixes != 2 || st.Total != 32 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMaxENI caps attachment below the instance limit.
func TestMaxENI(t *testing.T) {
	f := fresh(t, "t3.medium", Targets{WarmENI: 1, MaxENI: 1})
	f.step(t)
	f.assign(t, 5)
	if a := f.step(t); a != "" {
		t.Fatalf("MAX_ENI=1 attached: %q", a)
	}
}

// TestThrottledAndSubnetFull: a throttled call is retried on the next
// step; a full subnet stops growth for the back-off.
func TestThrottledAndSubnetFull(t *testing.T) {
	f := fresh(t, "m5.large", Targets{WarmIP: 2})
	f.cloud.InjectFault("AssignPrivateIpAddresses", memory.Fault{Code: "RequestLimitExceeded", Times: 1})
	if _, err := f.m.Step(context.Background()); !cloud.IsThrottled(err) {
		t.Fatalf("throttled step: %v", err)
	}
	if a := f.step(t); a != ActionAssignIPs {
		t.Fatalf("retry after throttling: %q", a)
	}
	f.assign(t, 2)
	f.cloud.InjectFault("AssignPrivateIpAddresses", memory.Fault{Code: "InsufficientFreeAddressesInSubnet", Times: 1})
	if _, err := f.m.Step(context.Background()); !cloud.IsSubnetFull(err) {
		t.Fatalf("subnet-full step: %v", err)
	}
	f.now = f.now.Add(time.Minute)
	if a := f.step(t); a != "" {
		t.Fatalf("grew during the back-off: %q", a)
	}
	f.now = f.now.Add(DefaultSubnetBackoff)
	if a := f.step(t); a != ActionAssignIPs {
		t.Fatalf("after the back-off: %q", a)
	}
}

// TestFailedENISetupGivesItBack (gomock): an ENI whose host networking
// cannot be configured is freed, not used.
func TestFailedENISetupGivesItBack(t *testing.T) {
	ctrl := gomock.NewController(t)
	prov := mock_cloud.NewMockProvider(ctrl)
	inst := cloud.Instance{Limits: cloud.Limits{ENIs: 3, IPv4PerENI: 2}, ENIs: []cloud.ENI{
		{ID: "eni-0", DeviceNumber: 0, IPv4: []netip.Addr{netip.MustParseAddr("10.0.1.11")}}}}
	store, _ := datastore.New(inst)
	store.Assign(datastore.Key{NetworkName: "n", ContainerID: "c", IfName: "eth0"}, datastore.Meta{}, datastore.IPv4, -1)
	eni := cloud.ENI{ID: "eni-1", DeviceNumber: 1}
	prov.EXPECT().AllocENI(gomock.Any()).Return(eni, nil)
	prov.EXPECT().FreeENI(gomock.Any(), "eni-1").Return(nil)
	m := New(store, prov, inst, Config{Targets: Targets{WarmIP: 1}, Limits: inst.Limits, Net: failingNet{}})
	if _, err := m.Step(context.Background()); err == nil {
		t.Fatal("a failed ENI setup went unreported")
	}
	if store.Stats().ENIs != 1 {
		t.Fatal("the unconfigured ENI joined the pool")
	}
}

type failingNet struct{}

func (failingNet) Setup(cloud.ENI) error    { return errors.New("no link") }
func (failingNet) Teardown(cloud.ENI) error { return nil }

// TestTargetsFromEnv: the reference's variables, with precise errors. A
// number out of range is passed on as it is, never replaced by a default:
// ipamd refuses it, naming the flag and its range.
func TestTargetsFromEnv(t *testing.T) {
	env := map[string]string{EnvWarmIP: "5", EnvMinimumIP: "10", EnvPrefixDelegation: "true", EnvWarmENI: "-1"}
	got, err := TargetsFromEnv(func(k string) string { return env[k] })
	if err != nil || got != (Targets{WarmENI: -1, WarmIP: 5, MinimumIP: 10, PrefixDelegation: true}) {
		t.Fatalf("%+v %v", got, err)
	}
	for k, v := range map[string]string{EnvWarmIP: "five", EnvMaxENI: "1.5", EnvPrefixDelegation: "yes"} {
		if _, err := TargetsFromEnv(func(n string) string {
			if n == k {
				return v
			}
			return ""
		}); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
}

// TestDueIsTheFirstPassThatCanAct: after a pass that did nothing, Due
// names the first moment a pass over the same store could act (a
// cooldown ending, the scale-down interval ending): a pass just before it
// does nothing, the pass at it acts. After a pass that acted, or once the
// store has changed, Due does not know.
func TestDueIsTheFirstPassThatCanAct(t *testing.T) {
	f := fresh(t, "m5.large", Targets{WarmIP: 1})
	if _, ok := f.m.Due(); ok {
		t.Fatal("Due known before any pass")
	}
	f.step(t) // grows to 1
	if _, ok := f.m.Due(); ok {
		t.Fatal("Due known after a pass that acted")
	}
	var keys []datastore.Key
	for range 2 {
		keys = append(keys, f.assign(t, 1)...)
		f.step(t) // grows by one
	}
	released := f.now
	for _, k := range keys {
		if _, err := f.store.Release(k, datastore.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.m.Due(); ok {
		t.Fatal("Due known after the store changed")
	}
	// Cooling: the pool looks at target until the addresses rest.
	stepsUntilDue(t, f, released.Add(30*time.Second), ActionUnassignIPs)

	// Over target again right after a shrink: the scale-down interval.
	shrunk := f.now
	eni := f.store.ENIs()[0].ID
	ips, err := f.cloud.Provider().AssignIPv4(context.Background(), eni, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.AddIPv4(eni, ips); err != nil {
		t.Fatal(err)
	}
	stepsUntilDue(t, f, shrunk.Add(DefaultScaleDownInterval), ActionUnassignIPs)
}

// stepsUntilDue runs a pass that must do nothing and name want as Due,
// then a pass a second before it (nothing) and one at it (act).
func stepsUntilDue(t *testing.T, f *fixture, want time.Time, act string) {
	t.Helper()
	if a := f.step(t); a != "" {
		t.Fatalf("a pass before %v did %q", want, a)
	}
	due, ok := f.m.Due()
	if !ok || !due.Equal(want) {
		t.Fatalf("Due %v (known %v), want %v", due, ok, want)
	}
	f.now = due.Add(-time.Second)
	if a := f.step(t); a != "" {
		t.Fatalf("a pass a second before Due did %q", a)
	}
	f.now = due
	if a := f.step(t); a != act {
		t.Fatalf("the pass at Due did %q, want %q", a, act)
	}
	if _, ok := f.m.Due(); ok {
		t.Fatal("Due known after a pass that acted")
	}
}
