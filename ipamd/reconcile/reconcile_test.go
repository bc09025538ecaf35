package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vpccni/vpccni/ownership"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/reconcile/internal/scene"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// modelWorld is a node namespace on the kernel model, with pod
// namespaces made on demand.
func modelWorld(t *testing.T) scene.World {
	t.Helper()
	k := model.New()
	must(t, k.AddNamespace("node"))
	node, err := k.Open("node")
	must(t, err)
	pods := 0
	return scene.World{Node: node, NewPodNS: func() (kernel.API, error) {
		pods++
		path := fmt.Sprintf("pod%d", pods)
		if err := k.AddNamespace(path); err != nil {
			return nil, err
		}
		return k.Open(path)
	}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, k kernel.API) kernel.State {
	t.Helper()
	s, err := kernel.Snapshot(k)
	must(t, err)
	return s
}

// runCase builds the foreign-rules node, runs one pass with the given
// ownership test (nil: the real one) and returns what Case.Check finds
// wrong, with the pass's log records.
func runCase(t *testing.T, owns reconcile.Ownership) (problems []string, rep reconcile.Report, logs []map[string]any) {
	t.Helper()
	w := modelWorld(t)
	c, err := scene.ForeignRules(w, t0)
	must(t, err)
	var buf bytes.Buffer
	r := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: c.Pool, Now: func() time.Time { return c.Now },
		Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	if owns != nil {
		reconcile.SetOwnership(r, owns)
	}
	before := snapshot(t, w.Node)
	rep, err = r.Run(context.Background())
	must(t, err)
	after := snapshot(t, w.Node)
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		rec := map[string]any{}
		must(t, json.Unmarshal(line, &rec))
		logs = append(logs, rec)
	}
	return c.Check(before, after, rep), rep, logs
}

// TestForeignRulesSurvive: one pass on a node full of look-alikes removes
// exactly the orphans and the gone pods' rules, releases exactly the old
// gone allocations, and leaves every other object byte-identical: the
// foreign rules at 10/512/1536, live pods' rules (one the pool forgot), a
// young allocation's, a cooling address's, and an orphan whose delete
// would hit a foreign rule.
func TestForeignRulesSurvive(t *testing.T) {
	problems, rep, logs := runCase(t, nil)
	for _, p := range problems {
		t.Error(p)
	}
	// One Info line per removal, with what it removed, and one summary.
	var removals, summaries int
	for _, rec := range logs {
		switch rec["msg"] {
		case "reconcile removed":
			removals++
			if rec["level"] != "INFO" || rec["kind"] == nil {
				t.Errorf("removal line %v", rec)
			}
			if rec["kind"] != string(reconcile.KindReleased) && (rec["prio"] == nil || rec["table"] == nil || rec["ip"] == nil && rec["iif"] == nil) {
				t.Errorf("rule removal line lacks prio/table/ip: %v", rec)
			}
		case "reconcile pass":
			summaries++
			for _, k := range reconcile.Kinds {
				if rec[string(k)] != float64(rep.Counts[k]) {
					t.Errorf("summary %s = %v, report says %d", k, rec[string(k)], rep.Counts[k])
				}
			}
		}
	}
	if removals != len(rep.Removed) || summaries != 1 {
		t.Errorf("%d removal lines for %d removals, %d summaries", removals, len(rep.Removed), summaries)
	}
}

// priorityOnly is a mutant of Owns that trusts the priority alone, as a
// cleanup that deletes `to <IP>` or `from <IP>` in any table would.
func priorityOnly(r kernel.Rule, _ ownership.Scope) (reconcile.Owned, bool) {
	addr := func(ip []byte) netip.Addr { a, _ := netip.AddrFromSlice(ip); return a.Unmap() }
	switch {
	case r.Priority == 512 && r.Dst != nil:
		return reconcile.Owned{Kind: reconcile.KindRuleToPod, IP: addr(r.Dst.IP)}, true
	case r.Priority == 1536 && r.Src != nil:
		return reconcile.Owned{Kind: reconcile.KindRuleFromPod, IP: addr(r.Src.IP)}, true
	case r.Priority == 10 && r.IifName != "":
		return reconcile.Owned{Kind: reconcile.KindRuleIIF, Link: r.IifName}, true
	}
	return reconcile.Owned{}, false
}

// TestOwnershipMutantIsCaught: with a too-permissive ownership test the
// very same case fails, naming the foreign rules the pass destroyed. This
// is what shows TestForeignRulesSurvive can fail.
func TestOwnershipMutantIsCaught(t *testing.T) {
	problems, _, _ := runCase(t, priorityOnly)
	for _, want := range []string{
		"removed but must survive: rule 512: from all to 10.0.1.0/24 lookup main",
		"removed but must survive: rule 1536: from 192.168.7.7 lookup 2",
		"removed but must survive: rule 512: from all to 10.0.2.50 lookup local",
		"removed but must survive: rule 1536: from 10.0.2.51 iif eth0 lookup 2",
		"removed but must survive: rule 1536: from 10.0.2.52 fwmark 0x80/0x80 lookup 2",
	} {
		if !slices.Contains(problems, want) {
			t.Errorf("the mutant went unnoticed: no %q among\n%s", want, strings.Join(problems, "\n"))
		}
	}
}

// TestSecondPassIsQuiet: a pass after a pass finds nothing to do.
func TestSecondPassIsQuiet(t *testing.T) {
	w := modelWorld(t)
	c, err := scene.ForeignRules(w, t0)
	must(t, err)
	r := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: c.Pool, Now: func() time.Time { return t0 }})
	_, err = r.Run(context.Background())
	must(t, err)
	before := snapshot(t, w.Node)
	rep, err := r.Run(context.Background())
	must(t, err)
	if added, removed := kernel.Diff(before, snapshot(t, w.Node)); len(added)+len(removed) != 0 || len(rep.Removed) != 0 {
		t.Fatalf("second pass: added %q, removed %q, report %v", added, removed, rep.Removed)
	}
}

// gonePod is a node with one allocation whose pod has no veth and whose
// rules are still there.
func gonePod(t *testing.T, since time.Time) (scene.World, *scene.Pool) {
	t.Helper()
	w := modelWorld(t)
	must(t, w.Prepare())
	pool := scene.NewPool(scene.Ranges...)
	ip := scene.Addr("10.0.2.30")
	pool.Hold(reconcile.Holder{ID: "gone", IP: ip, PodNamespace: "default", PodName: "gone-0", Since: since})
	must(t, w.Rules(scene.ToPod(ip), scene.FromPod(ip, 2)))
	return w, pool
}

// TestGraceKeepsYoungAllocations: an allocation without a veth is an ADD
// in progress until it is DefaultGrace old; then it is released with its
// rules.
func TestGraceKeepsYoungAllocations(t *testing.T) {
	w, pool := gonePod(t, t0)
	now := t0.Add(reconcile.DefaultGrace - time.Second)
	r := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: func() time.Time { return now }})
	before := snapshot(t, w.Node)
	rep, err := r.Run(context.Background())
	must(t, err)
	if added, removed := kernel.Diff(before, snapshot(t, w.Node)); len(added)+len(removed)+len(pool.Released()) != 0 {
		t.Fatalf("young allocation: removed %q, released %q, report %v", removed, pool.Released(), rep.Removed)
	}
	now = t0.Add(reconcile.DefaultGrace)
	rep, err = r.Run(context.Background())
	must(t, err)
	_, removed := kernel.Diff(before, snapshot(t, w.Node))
	want := []string{"rule 512: from all to 10.0.2.30 lookup main", "rule 1536: from 10.0.2.30 lookup 2"}
	if !slices.Equal(removed, want) || !slices.Equal(pool.Released(), []string{"gone"}) {
		t.Fatalf("old allocation: removed %q (want %q), released %q", removed, want, pool.Released())
	}
	if got := rep.Removed[len(rep.Removed)-1]; got.Kind != reconcile.KindReleased || got.String() != "released 10.0.2.30 (default/gone-0)" {
		t.Fatalf("release must come after its rules: %v", rep.Removed)
	}
}

// failingDel is a kernel whose RuleDel fails for one rule.
type failingDel struct {
	kernel.API
	rule string
}

func (f failingDel) RuleDel(r kernel.Rule) error {
	if kernel.RuleString(r) == f.rule {
		return fmt.Errorf("delete: %w", syscall.EPERM)
	}
	return f.API.RuleDel(r)
}

// TestFailedTeardownKeepsAllocation: tear down before release. When a rule
// of a gone pod cannot be deleted the allocation is kept (else the address
// would go to a new pod with the old rule in place), the error is
// returned, and the next pass finishes the job.
func TestFailedTeardownKeepsAllocation(t *testing.T) {
	w, pool := gonePod(t, t0)
	now := func() time.Time { return t0.Add(time.Hour) }
	bad := failingDel{API: w.Node, rule: "rule 1536: from 10.0.2.30 lookup 2"}
	rep, err := reconcile.New(reconcile.Config{Kernel: bad, Pool: pool, Now: now}).Run(context.Background())
	if !errors.Is(err, syscall.EPERM) || len(pool.Released()) != 0 || rep.Counts[reconcile.KindReleased] != 0 {
		t.Fatalf("err %v, released %q", err, pool.Released())
	}
	rep, err = reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: now}).Run(context.Background())
	must(t, err)
	if !slices.Equal(pool.Released(), []string{"gone"}) || rep.Counts[reconcile.KindRuleFromPod] != 1 {
		t.Fatalf("retry: released %q, report %v", pool.Released(), rep.Removed)
	}
}

// addDuringDel is a kernel on which a pod's ADD takes an orphan's address
// while the reconciler deletes the orphan's rule: the pool assigns it, the
// plugin makes the veth and host route, and its own RuleAdd finds the old
// rule (EEXIST, which the plugin ignores) just before it goes.
type addDuringDel struct {
	kernel.API
	w     scene.World
	pool  *scene.Pool
	ip    netip.Addr
	fired bool
}

func (a *addDuringDel) RuleDel(r kernel.Rule) error {
	if !a.fired && r.Dst != nil && r.Dst.IP.Equal(scene.Host(a.ip).IP) {
		a.fired = true
		a.pool.Hold(reconcile.Holder{ID: "new", IP: a.ip, PodNamespace: "default", PodName: "new-0", Since: t0})
		if _, err := a.w.Pod("eni", "default", "new-0", a.ip, kernel.TableMain, false); err != nil {
			return err
		}
	}
	return a.API.RuleDel(r)
}

// TestPodTakingTheAddressKeepsItsRule: the check before the delete cannot
// see an ADD that lands during it; the check after does, and the rule is
// put back.
func TestPodTakingTheAddressKeepsItsRule(t *testing.T) {
	w := modelWorld(t)
	must(t, w.Prepare())
	pool := scene.NewPool(scene.Ranges...)
	ip := scene.Addr("10.0.1.20")
	must(t, w.Rules(scene.ToPod(ip)))
	k := &addDuringDel{API: w.Node, w: w, pool: pool, ip: ip}
	rep, err := reconcile.New(reconcile.Config{Kernel: k, Pool: pool, Now: func() time.Time { return t0 }}).Run(context.Background())
	must(t, err)
	rules, err := w.Node.RuleList(kernel.FamilyV4)
	must(t, err)
	kept := slices.ContainsFunc(rules, func(r kernel.Rule) bool { return kernel.RuleString(r) == "rule 512: from all to 10.0.1.20 lookup main" })
	if !k.fired || !kept || len(rep.Removed) != 0 || len(rep.Skipped) != 1 {
		t.Fatalf("fired %v, rule kept %v, report %+v", k.fired, kept, rep)
	}
}

// TestCancelledPassStops: a cancelled context stops the pass and says so.
func TestCancelledPassStops(t *testing.T) {
	w, pool := gonePod(t, t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: func() time.Time { return t0.Add(time.Hour) }}).Run(ctx)
	if !errors.Is(err, context.Canceled) || len(pool.Released()) != 0 {
		t.Fatalf("err %v, released %q", err, pool.Released())
	}
}

// TestLoopRunsUntilCancelled: Loop runs a pass at once, then on every
// tick, and returns when its context ends.
func TestLoopRunsUntilCancelled(t *testing.T) {
	w, pool := gonePod(t, t0)
	r := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: func() time.Time { return t0.Add(time.Hour) }})
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan reconcile.Report, 10)
	done := make(chan struct{})
	go func() {
		r.Loop(ctx, time.Millisecond, func(rep reconcile.Report, err error) {
			if err == nil {
				passes <- rep
			}
		})
		close(done)
	}()
	first, second := <-passes, <-passes
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Loop did not return after cancel")
	}
	if first.Counts[reconcile.KindReleased] != 1 || len(second.Removed) != 0 {
		t.Fatalf("first pass %v, second %v", first.Removed, second.Removed)
	}
}

// TestLeftRuleKeepsAllocation: a gone pod's rule that cannot be deleted
// safely (a foreign rule listed before it would go instead) keeps its
// allocation: releasing would let the address move on with the rule.
func TestLeftRuleKeepsAllocation(t *testing.T) {
	w := modelWorld(t)
	must(t, w.Prepare())
	pool := scene.NewPool(scene.Ranges...)
	ip := scene.Addr("10.0.2.30")
	pool.Hold(reconcile.Holder{ID: "gone", IP: ip, PodNamespace: "default", PodName: "gone-0", Since: t0})
	foreign := scene.ToPod(ip)
	foreign.IifName = "eth0"
	must(t, w.Rules(foreign, scene.ToPod(ip), scene.FromPod(ip, 2)))
	before := snapshot(t, w.Node)
	rep, err := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: func() time.Time { return t0.Add(time.Hour) }}).Run(context.Background())
	must(t, err)
	_, removed := kernel.Diff(before, snapshot(t, w.Node))
	if !slices.Equal(removed, []string{"rule 1536: from 10.0.2.30 lookup 2"}) || len(pool.Released()) != 0 {
		t.Fatalf("removed %q, released %q", removed, pool.Released())
	}
	var skipped []string
	for _, s := range rep.Skipped {
		skipped = append(skipped, s.What)
	}
	if want := []string{"rule 512: from all to 10.0.2.30 lookup main", "release 10.0.2.30 (default/gone-0)"}; !slices.Equal(skipped, want) {
		t.Fatalf("skipped %q, want %q", skipped, want)
	}
}

// lookalikes is a kernel that lists one rule twice: two rules that read
// the same differ in a selector kernel.Rule cannot show (ipproto, ports,
// uidrange, tos, `not`), which the model cannot hold.
type lookalikes struct {
	kernel.API
	rule string
}

func (l lookalikes) RuleList(f kernel.Family) ([]kernel.Rule, error) {
	rules, err := l.API.RuleList(f)
	for _, r := range rules {
		if kernel.RuleString(r) == l.rule {
			return append(rules, r), err
		}
	}
	return rules, err
}

// TestLookalikeRuleIsLeftAlone: the reconciler matches a delete request as
// the driver does (one implementation, ownership.ShadowedBy): when another
// rule reads the same as a gone pod's, nothing tells which is the pod's,
// so both stay, the pass says why, and the allocation is not released
// while a rule of its address stays.
func TestLookalikeRuleIsLeftAlone(t *testing.T) {
	w, pool := gonePod(t, t0)
	twin := "rule 512: from all to 10.0.2.30 lookup main"
	k := lookalikes{API: w.Node, rule: twin}
	before := snapshot(t, w.Node)
	rep, err := reconcile.New(reconcile.Config{Kernel: k, Pool: pool, Now: func() time.Time { return t0.Add(time.Hour) }}).Run(context.Background())
	must(t, err)
	_, removed := kernel.Diff(before, snapshot(t, w.Node))
	if slices.Contains(removed, twin) || len(pool.Released()) != 0 {
		t.Fatalf("removed %q, released %q: a look-alike's twin was deleted", removed, pool.Released())
	}
	found := false
	for _, s := range rep.Skipped {
		found = found || (s.What == twin && strings.Contains(s.Reason, "reads the same"))
	}
	if !found {
		t.Fatalf("the look-alike is not reported: %+v", rep.Skipped)
	}
}
