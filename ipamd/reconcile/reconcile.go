// Package reconcile is what ipamd does about what it missed: on start and
// periodically it releases allocations whose pod is gone, and removes the
// pod rules it owns that belong to no allocation (docs/architecture.md#the-delete-flow,
// step 7).
//
// A DEL that never reached ipamd (ipamd evicted, killed, or restarted
// without its checkpoint) leaves an allocation nobody will release and
// rules 512/1536 nobody will delete; the rules outlive the pod's veth, and
// once the address lives on another node they misroute this node's
// traffic to it (aws/amazon-vpc-cni-k8s#2048). The reference prunes such
// rules only for checkpointed pods, and deletes `from <IP>` rules in any
// table. Here every deletion is of a rule ipamd provably made (Owns:
// exact selector, its own priorities, a pool address, a pod table) and
// provably needs no more: no allocation holds the address, it is not
// cooling down, and the kernel shows no live pod on it (a main-table host
// route to an existing link). A live pod the pool forgot keeps its rules.
//
// The reconciler runs in ipamd, in the node namespace, and sees the kernel
// only through kernel.API and the pool through Pool.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vpccni/vpccni/kernel"
)

// Holder is an assigned address as the pool sees it.
type Holder struct {
	ID string // opaque: passed back to Pool.Release
	IP netip.Addr
	// PodNamespace and PodName name the pod; both are empty for an
	// allocation recovered from the kernel.
	PodNamespace, PodName string
	// HostVeth is set for a recovered allocation: the link whose existence
	// proves the pod lives, and HostVethIndex its ifindex when recorded (a
	// later veth of the same name is another sandbox's).
	HostVeth      string
	HostVethIndex int
	Since         time.Time // when the address was assigned
}

func (h Holder) String() string {
	if h.PodName != "" {
		return h.PodNamespace + "/" + h.PodName
	}
	if h.HostVeth != "" {
		return "recovered " + h.HostVeth
	}
	return "holder " + h.ID
}

// Pool is what the reconciler needs of ipamd's address pool.
type Pool interface {
	// Holders lists the assigned addresses.
	Holders() []Holder
	// Release frees an allocation (its address then cools down).
	Release(id string) error
	// IsPodAddress reports whether ip is one ipamd hands to pods: an ENI's
	// secondary address or one in a delegated prefix.
	IsPodAddress(ip netip.Addr) bool
	// IsCooling reports whether ip was released less than the cooldown ago.
	IsCooling(ip netip.Addr) bool
}

// DefaultGrace is how old an allocation must be before the reconciler
// may find its pod gone: an ADD assigns the address before it makes the
// veth, so a young allocation without a veth is an ADD in progress.
const DefaultGrace = 60 * time.Second

// Config configures a Reconciler.
type Config struct {
	Kernel kernel.API // the node namespace
	Pool   Pool
	Grace  time.Duration    // 0: DefaultGrace; ipamd checks its range (ipamd.ReconcileGraceRange)
	Now    func() time.Time // nil: time.Now
	Log    *slog.Logger     // nil: discard
}

// Reconciler runs reconciliation passes. A Reconciler must not run two
// passes at once (Loop runs them one after another).
type Reconciler struct {
	k     kernel.API
	pool  Pool
	grace time.Duration
	now   func() time.Time
	log   *slog.Logger
	// owns is Owns; tests replace it with a wrong one to show the suite
	// catches a too-permissive ownership test (export_test.go).
	owns Ownership
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	r := &Reconciler{k: cfg.Kernel, pool: cfg.Pool, grace: cfg.Grace, now: cfg.Now, log: cfg.Log, owns: Owns}
	if r.grace == 0 {
		r.grace = DefaultGrace
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// Removal is one thing a pass removed.
type Removal struct {
	Kind Kind
	IP   netip.Addr  // the address released, or of a 512/1536 rule
	Rule kernel.Rule // the rule deleted (zero for KindReleased)
	// Holder is the allocation released, or whose rules these were.
	Holder string
}

func (m Removal) String() string {
	if m.Kind == KindReleased {
		return fmt.Sprintf("released %s (%s)", m.IP, m.Holder)
	}
	return kernel.RuleString(m.Rule)
}

// Skip is something that looked reclaimable and was left alone, and why.
type Skip struct {
	What, Reason string
}

// Report is the outcome of one pass.
type Report struct {
	Counts  map[Kind]int // by kind, every kind present
	Removed []Removal    // in the order removed
	Skipped []Skip
	// Waiting counts what was left only for now: an allocation whose pod
	// looks gone but is younger than the grace period, an orphan rule
	// whose address is cooling down. A later pass over the same kernel
	// and pool may remove them, so such a pass is not a settled one.
	Waiting int
}

// Settled reports whether a pass that made this report changed nothing
// and left nothing for later: another pass over the same kernel and pool
// would make the same report.
func (rep Report) Settled() bool {
	return len(rep.Removed) == 0 && len(rep.Skipped) == 0 && rep.Waiting == 0
}

func (rep *Report) removed(m Removal) {
	rep.Counts[m.Kind]++
	rep.Removed = append(rep.Removed, m)
}

// Run makes one pass: it releases the allocations whose pod is gone
// (removing the rules they own first), then deletes the orphan rules. It
// goes on past a failed step and returns every error, joined; what it
// could not do is done by the next pass.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	rep := Report{Counts: make(map[Kind]int, len(Kinds))}
	for _, k := range Kinds {
		rep.Counts[k] = 0
	}
	v, err := readView(r.k)
	if err != nil {
		return r.done(rep, []error{fmt.Errorf("read the node namespace: %w", err)})
	}
	// The pool is read after the kernel: an ADD assigns before it makes
	// kernel objects, so every pod rule seen above has its holder below.
	holders := sortedHolders(r.pool.Holders())
	var errs []error
	for _, h := range holders {
		if err := ctx.Err(); err != nil {
			return r.done(rep, append(errs, err))
		}
		if err := r.releaseIfGone(v, h, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	held := make(map[netip.Addr]bool, len(holders))
	for _, h := range holders {
		held[h.IP] = true
	}
	for _, rule := range slices.Clone(v.rules) {
		if err := ctx.Err(); err != nil {
			return r.done(rep, append(errs, err))
		}
		if err := r.removeIfOrphan(v, rule, held, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	return r.done(rep, errs)
}

// done logs the pass's summary line: at INFO when the pass removed,
// skipped or failed something, at DEBUG when it found nothing to do (the
// loop runs every few seconds).
func (r *Reconciler) done(rep Report, errs []error) (Report, error) {
	err := errors.Join(errs...)
	attrs := []any{}
	for _, k := range Kinds {
		attrs = append(attrs, string(k), rep.Counts[k])
	}
	attrs = append(attrs, "skipped", len(rep.Skipped))
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	level := slog.LevelDebug
	if len(rep.Removed) > 0 || len(rep.Skipped) > 0 || err != nil {
		level = slog.LevelInfo
	}
	r.log.Log(context.Background(), level, "reconcile pass", attrs...)
	return rep, err
}

// releaseIfGone releases an allocation older than the grace period whose
// pod the kernel no longer shows, after deleting the rules it owns for its
// address: tear down before release, so a failed deletion leaves the
// allocation for the next pass rather than a released address with rules.
func (r *Reconciler) releaseIfGone(v *view, h Holder, rep *Report) error {
	alive, known := v.podAlive(h)
	if alive || !known {
		return nil
	}
	if r.now().Sub(h.Since) < r.grace {
		rep.Waiting++
		return nil
	}
	if l, inUse := v.hostRoutes[h.IP]; inUse {
		// Another pod's veth has the address (the pool and the kernel
		// disagree). Its rules serve that pod, and releasing would hand
		// the address out twice; the allocation goes when that link does.
		rep.Skipped = append(rep.Skipped, Skip{What: fmt.Sprintf("release %s (%s)", h.IP, h), Reason: "address routed to live link " + l.Name})
		r.log.Warn("pod gone but its address is routed to another link: not releasing", "ip", h.IP, "holder", h.String(), "link", l.Name)
		return nil
	}
	// The rules are this holder's (its pod is gone, nothing else routes
	// the address): cooling does not protect them.
	stillUnused := func() (bool, error) { return r.addressUnused(h.IP, nil) }
	var errs []error
	left := 0
	for _, rule := range slices.Clone(v.rules) {
		o, ok := r.owns(rule, v.scope(r.pool))
		if !ok || o.IP != h.IP || (o.Kind != KindRuleToPod && o.Kind != KindRuleFromPod) {
			continue
		}
		kept, err := r.deleteRule(v, rule, o, h.String(), stillUnused, rep)
		if err != nil {
			errs = append(errs, err)
		}
		if kept {
			left++
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("rules of %s (%s), not released: %w", h.IP, h, errors.Join(errs...))
	}
	if left > 0 {
		// A rule of the address stays (why is in Skipped): releasing now
		// would let the address move on with it.
		rep.Skipped = append(rep.Skipped, Skip{What: fmt.Sprintf("release %s (%s)", h.IP, h), Reason: fmt.Sprintf("%d of its rules left in place", left)})
		return nil
	}
	if err := r.pool.Release(h.ID); err != nil {
		return fmt.Errorf("release %s (%s): %w", h.IP, h, err)
	}
	m := Removal{Kind: KindReleased, IP: h.IP, Holder: h.String()}
	rep.removed(m)
	r.log.Info("reconcile removed", "kind", string(m.Kind), "ip", h.IP, "holder", m.Holder, "since", h.Since)
	return nil
}

// removeIfOrphan deletes a rule ipamd owns that nothing needs any more.
func (r *Reconciler) removeIfOrphan(v *view, rule kernel.Rule, held map[netip.Addr]bool, rep *Report) error {
	o, ok := r.owns(rule, v.scope(r.pool))
	if !ok {
		return nil
	}
	var stillOrphan func() (bool, error)
	if o.Kind == KindRuleIIF {
		if _, exists := v.links[o.Link]; exists {
			return nil
		}
		stillOrphan = func() (bool, error) { return r.linkGone(o.Link) }
	} else {
		if _, live := v.hostRoutes[o.IP]; live || held[o.IP] {
			return nil
		}
		if r.pool.IsCooling(o.IP) {
			rep.Waiting++
			return nil
		}
		stillOrphan = func() (bool, error) { return r.addressUnused(o.IP, r.pool) }
	}
	_, err := r.deleteRule(v, rule, o, "", stillOrphan, rep)
	return err
}

// deleteRule deletes one owned rule by its exact description, and says
// whether the rule was kept on purpose. unneeded is asked again right
// before and right after the delete, because ipamd serves ADDs while a
// pass runs: a pod that took the address (or made the link) in between
// keeps its rule, and one that did so during the delete gets it back.
func (r *Reconciler) deleteRule(v *view, rule kernel.Rule, o Owned, holder string, unneeded func() (bool, error), rep *Report) (kept bool, err error) {
	desc := kernel.RuleString(rule)
	if blocker, why, shadowed := v.shadowedBy(rule); shadowed {
		rep.Skipped = append(rep.Skipped, Skip{What: desc, Reason: why + " " + kernel.RuleString(blocker)})
		r.log.Warn("orphan rule left: a delete request for it could remove a foreign rule", "rule", desc, "why", why, "foreign", kernel.RuleString(blocker))
		return true, nil
	}
	if ok, err := unneeded(); err != nil || !ok {
		return true, err
	}
	if err := r.k.RuleDel(rule); err != nil {
		if kernel.IsNotFound(err) { // someone else deleted it (a late DEL)
			v.forget(rule)
			return false, nil
		}
		return true, fmt.Errorf("delete %s: %w", desc, err)
	}
	v.forget(rule)
	if ok, err := unneeded(); err == nil && !ok {
		if err := r.k.RuleAdd(rule); err != nil && !kernel.IsExist(err) {
			return false, fmt.Errorf("restore %s after a pod took it: %w", desc, err)
		}
		rep.Skipped = append(rep.Skipped, Skip{What: desc, Reason: "a pod took it during the delete: restored"})
		r.log.Warn("rule restored: a pod took it while it was deleted", "rule", desc)
		return true, nil
	}
	m := Removal{Kind: o.Kind, IP: o.IP, Rule: rule, Holder: holder}
	rep.removed(m)
	attrs := []any{"kind", string(o.Kind), "prio", rule.Priority, "table", kernel.TableString(rule.Table), "rule", desc}
	if o.IP.IsValid() {
		attrs = append(attrs, "ip", o.IP)
	} else {
		attrs = append(attrs, "iif", o.Link)
	}
	if holder != "" {
		attrs = append(attrs, "holder", holder)
	}
	r.log.Info("reconcile removed", attrs...)
	return false, nil
}

// addressUnused asks the kernel now (not the view) whether a pod's host
// route holds ip, and, when pool is given, whether the pool holds it or it
// is cooling down.
func (r *Reconciler) addressUnused(ip netip.Addr, pool Pool) (bool, error) {
	if pool != nil {
		if pool.IsCooling(ip) {
			return false, nil
		}
		for _, h := range pool.Holders() {
			if h.IP == ip {
				return false, nil
			}
		}
	}
	links, err := linksByName(r.k)
	if err != nil {
		return false, err
	}
	routes, err := mainHostRoutes(r.k, links)
	if err != nil {
		return false, err
	}
	_, routed := routes[ip]
	return !routed, nil
}

// linkGone asks the kernel now whether the link is (still) missing.
func (r *Reconciler) linkGone(name string) (bool, error) {
	_, err := r.k.LinkByName(name)
	if kernel.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// sortedHolders orders holders by address, then ID, so passes (and their
// logs) are deterministic.
func sortedHolders(hs []Holder) []Holder {
	out := slices.Clone(hs)
	slices.SortFunc(out, func(a, b Holder) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Loop runs a pass at once and then every interval until ctx ends,
// handing each outcome to done (nil: ignored; the pass logs anyway).
func (r *Reconciler) Loop(ctx context.Context, interval time.Duration, done func(Report, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := r.Run(ctx)
		if done != nil && ctx.Err() == nil {
			done(rep, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
