package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ipamd/datastore"
)

// Actions, for logs and metrics.
const (
	ActionAllocENI         = "alloc-eni"
	ActionFreeENI          = "free-eni"
	ActionAssignIPs        = "assign-ips"
	ActionUnassignIPs      = "unassign-ips"
	ActionAssignPrefixes   = "assign-prefixes"
	ActionUnassignPrefixes = "unassign-prefixes"
)

// Defaults of the reference.
const (
	DefaultInterval          = 5 * time.Second   // ipPoolMonitorInterval
	DefaultScaleDownInterval = 30 * time.Second  // decrease at most this often
	DefaultSubnetBackoff     = 120 * time.Second // after InsufficientFreeAddressesInSubnet
)

// ENINet configures the node side of an ENI (eninet.Net).
type ENINet interface {
	Setup(e cloud.ENI) error
	Teardown(e cloud.ENI) error
}

// Config configures a Manager.
type Config struct {
	Targets Targets
	Limits  cloud.Limits
	// IPv6 pools come from the primary ENI's delegated prefix: the manager
	// attaches nothing (the reference attaches no extra ENI in IPv6 mode).
	IPv6              bool
	ScaleDownInterval time.Duration
	SubnetBackoff     time.Duration
	Now               func() time.Time
	Log               *slog.Logger
	// Observe is told of every EC2-backed action and its result (metrics).
	Observe func(action string, err error)
	Net     ENINet
}

// Manager keeps the pool at its targets.
type Manager struct {
	store *datastore.Store
	prov  cloud.Provider
	cfg   Config

	mu            sync.Mutex
	attached      map[string]cloud.ENI // by ID, as attached (for teardown)
	lastScaleDown time.Time
	backoffUntil  time.Time
	idle          idleStep // what the last Step that did nothing proves (Due)
}

// idleStep is a Step that did nothing, at the store's version: Step reads
// nothing but the store, the manager's own fields (which only a Step that
// acts changes) and the clock, so the passes after it do nothing either
// while the version stays and the clock is before until (zero: never).
type idleStep struct {
	valid   bool
	version uint64
	until   time.Time
}

// New manages store's pool on the instance's ENIs through prov.
func New(store *datastore.Store, prov cloud.Provider, inst cloud.Instance, cfg Config) *Manager {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Observe == nil {
		cfg.Observe = func(string, error) {}
	}
	if cfg.ScaleDownInterval == 0 {
		cfg.ScaleDownInterval = DefaultScaleDownInterval
	}
	if cfg.SubnetBackoff == 0 {
		cfg.SubnetBackoff = DefaultSubnetBackoff
	}
	// The first shrink waits a whole interval too: a daemon that just
	// started does not know yet what the node's pods are about to need
	// (the reference keeps an ENI at least a minute).
	m := &Manager{store: store, prov: prov, cfg: cfg, attached: map[string]cloud.ENI{}, lastScaleDown: cfg.Now()}
	for _, e := range inst.ENIs {
		m.attached[e.ID] = e
	}
	return m
}

// Targets are the manager's settings.
func (m *Manager) Targets() Targets { return m.cfg.Targets }

// MaxENIs is how many ENIs the instance may have attached.
func (m *Manager) MaxENIs() int {
	n := m.cfg.Limits.ENIs
	if t := m.cfg.Targets.MaxENI; t > 0 && t < n {
		n = t
	}
	return n
}

// slotsPerENI is how many secondary addresses or /28s one ENI takes.
func (m *Manager) slotsPerENI() int { return max(m.cfg.Limits.IPv4PerENI-1, 0) }

// perSlot is the addresses one slot gives.
func (m *Manager) perSlot() int {
	if m.cfg.Targets.PrefixDelegation {
		return 16
	}
	return 1
}

// Step does one pass: grow when short, else shrink when over target and
// the last shrink is long enough ago. It returns what it did ("" for
// nothing) and the error of a failed action; the next Step tries again.
func (m *Manager) Step(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	version := m.store.Version()
	action, until, err := m.step(ctx)
	m.idle = idleStep{}
	if action == "" && err == nil {
		m.idle = idleStep{valid: true, version: version, until: until}
		if ends, cooling := m.store.CooldownEnds(); cooling && (until.IsZero() || ends.Before(until)) {
			m.idle.until = ends // a rested address changes what is available
		}
	}
	return action, err
}

// step is Step's pass. When it does nothing, until is the first moment a
// pass could act on the same store (a back-off or the scale-down interval
// ending), zero if none.
func (m *Manager) step(ctx context.Context) (action string, until time.Time, err error) {
	if m.cfg.IPv6 {
		return "", time.Time{}, nil
	}
	st := m.store.Stats()
	short, over := m.cfg.Targets.need(st.Total, st.Available(), m.slotsPerENI()*m.perSlot())
	now := m.cfg.Now()
	switch {
	case short > 0:
		if now.Before(m.backoffUntil) {
			return "", m.backoffUntil, nil
		}
		action, err := m.grow(ctx, short)
		if cloud.IsSubnetFull(err) {
			m.backoffUntil = now.Add(m.cfg.SubnetBackoff)
			m.cfg.Log.Warn("subnet has no free addresses; backing off", "until", m.backoffUntil, "error", err)
		}
		return action, time.Time{}, err
	case over > 0 && now.Sub(m.lastScaleDown) >= m.cfg.ScaleDownInterval:
		action, err := m.shrink(ctx, over)
		if action != "" {
			m.lastScaleDown = now
		}
		return action, time.Time{}, err
	case over > 0:
		return "", m.lastScaleDown.Add(m.cfg.ScaleDownInterval), nil
	}
	return "", time.Time{}, nil
}

// Due is when the next Step may act, for a harness that runs the loops
// on a simulated clock and skips the passes that would do nothing: ok is
// false when that is not known (no Step yet, or the last one acted or
// failed, or the store changed since): the next pass must run. A zero
// time with ok means no pass acts until the store changes.
func (m *Manager) Due() (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.idle.valid || m.store.Version() != m.idle.version {
		return time.Time{}, false
	}
	return m.idle.until, true
}

// grow adds at least short addresses if it can: slots on attached ENIs
// first, then a new ENI.
func (m *Manager) grow(ctx context.Context, short int) (string, error) {
	slots := (short + m.perSlot() - 1) / m.perSlot()
	for _, e := range m.store.ENIs() {
		if e.Trunk {
			continue
		}
		room := m.slotsPerENI() - len(e.IPv4) - len(e.IPv4Prefixes)
		if room > 0 {
			return m.fill(ctx, e.ID, m.slotsToFill(slots, room))
		}
	}
	if len(m.attached) >= m.MaxENIs() {
		m.cfg.Log.Debug("pool short but every ENI is full and no ENI slot is left", "short", short, "maxENIs", m.MaxENIs())
		return "", nil
	}
	eni, err := m.prov.AllocENI(ctx)
	m.cfg.Observe(ActionAllocENI, err)
	if err != nil {
		return ActionAllocENI, fmt.Errorf("attach an ENI: %w", err)
	}
	if err := m.cfg.Net.Setup(eni); err != nil {
		// Without its table and rule the ENI's pods would be misrouted:
		// give it back rather than use it.
		ferr := m.prov.FreeENI(ctx, eni.ID)
		m.cfg.Observe(ActionFreeENI, ferr)
		return ActionAllocENI, errors.Join(fmt.Errorf("configure ENI %s: %w", eni.ID, err), ferr)
	}
	eni.IPv4, eni.IPv4Prefixes = nil, nil // added below, as EC2 grants them
	if err := m.store.AddENI(eni); err != nil {
		return ActionAllocENI, err
	}
	m.attached[eni.ID] = eni
	m.cfg.Log.Info("ENI attached", "eni", eni.ID, "device", eni.DeviceNumber, "mac", eni.MAC, "short", short)
	_, err = m.fill(ctx, eni.ID, m.slotsToFill(slots, m.slotsPerENI()))
	return ActionAllocENI, err
}

// slotsToFill is how many addresses or /28s to ask for on an ENI with
// room for room more, slots being what the pool is short of. As in the
// reference: with WARM_IP_TARGET or MINIMUM_IP_TARGET, just what is
// short; with prefix delegation, what WARM_PREFIX_TARGET is short of (at
// least one /28); in whole-ENI granularity (WARM_ENI_TARGET), the ENI's
// whole room, so a new ENI comes with all its addresses.
func (m *Manager) slotsToFill(slots, room int) int {
	t := m.cfg.Targets
	if t.ipGranular() || t.PrefixDelegation {
		return min(max(slots, 1), room)
	}
	return room
}

func (m *Manager) fill(ctx context.Context, eniID string, n int) (string, error) {
	if m.cfg.Targets.PrefixDelegation {
		pfx, err := m.prov.AssignIPv4Prefixes(ctx, eniID, n)
		m.cfg.Observe(ActionAssignPrefixes, err)
		if err != nil {
			return ActionAssignPrefixes, fmt.Errorf("assign %d prefixes to %s: %w", n, eniID, err)
		}
		m.cfg.Log.Info("prefixes assigned", "eni", eniID, "prefixes", pfx)
		return ActionAssignPrefixes, m.store.AddIPv4Prefixes(eniID, pfx)
	}
	ips, err := m.prov.AssignIPv4(ctx, eniID, n)
	m.cfg.Observe(ActionAssignIPs, err)
	if err != nil {
		return ActionAssignIPs, fmt.Errorf("assign %d addresses to %s: %w", n, eniID, err)
	}
	m.cfg.Log.Info("addresses assigned", "eni", eniID, "count", len(ips))
	return ActionAssignIPs, m.store.AddIPv4(eniID, ips)
}

// shrink gives back up to over addresses: whole free ENIs in ENI
// granularity, else free addresses or prefixes, highest device first. The
// primary ENI is never freed.
func (m *Manager) shrink(ctx context.Context, over int) (string, error) {
	enis := m.store.ENIs()
	slices.Reverse(enis)
	if !m.cfg.Targets.ipGranular() && !(m.cfg.Targets.PrefixDelegation && m.cfg.Targets.WarmPrefix > 0) {
		for _, e := range enis {
			if e.Device == 0 || e.Trunk || e.Assigned+e.Cooling > 0 || e.Total > over {
				continue
			}
			return ActionFreeENI, m.freeENI(ctx, e.ID)
		}
		return "", nil
	}
	for _, e := range enis {
		if e.Trunk {
			continue
		}
		if m.cfg.Targets.PrefixDelegation {
			pfx, _ := m.store.TakeFreePrefixes(e.ID, over/16)
			if len(pfx) == 0 {
				continue
			}
			err := m.prov.UnassignIPv4Prefixes(ctx, e.ID, pfx)
			m.cfg.Observe(ActionUnassignPrefixes, err)
			if err != nil {
				return ActionUnassignPrefixes, errors.Join(err, m.store.AddIPv4Prefixes(e.ID, pfx))
			}
			m.cfg.Log.Info("prefixes given back", "eni", e.ID, "prefixes", pfx)
			return ActionUnassignPrefixes, nil
		}
		ips, _ := m.store.TakeFreeIPv4(e.ID, over)
		if len(ips) == 0 {
			continue
		}
		err := m.prov.UnassignIPv4(ctx, e.ID, ips)
		m.cfg.Observe(ActionUnassignIPs, err)
		if err != nil {
			return ActionUnassignIPs, errors.Join(err, m.store.AddIPv4(e.ID, ips))
		}
		m.cfg.Log.Info("addresses given back", "eni", e.ID, "count", len(ips))
		return ActionUnassignIPs, nil
	}
	return "", nil
}

func (m *Manager) freeENI(ctx context.Context, id string) error {
	removed, err := m.store.RemoveENI(id)
	if err != nil {
		return err
	}
	eni := m.attached[id]
	if err := m.cfg.Net.Teardown(eni); err != nil {
		m.cfg.Log.Warn("ENI host state not fully removed", "eni", id, "error", err)
	}
	err = m.prov.FreeENI(context.WithoutCancel(ctx), id)
	m.cfg.Observe(ActionFreeENI, err)
	if err != nil {
		// Still attached: put it back so its addresses are used, not lost.
		eni.IPv4, eni.IPv4Prefixes = removed.IPv4, removed.IPv4Prefixes
		return errors.Join(fmt.Errorf("free ENI %s: %w", id, err), m.cfg.Net.Setup(eni), m.store.AddENI(eni))
	}
	delete(m.attached, id)
	m.cfg.Log.Info("ENI freed", "eni", id, "device", eni.DeviceNumber)
	return nil
}

// Run steps every interval until ctx ends.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if action, err := m.Step(ctx); err != nil {
			m.cfg.Log.Warn("warm pool action failed; retrying next pass", "action", action, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
