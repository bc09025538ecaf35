package realkernel

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/reconcile/internal/scene"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// open makes a namespace for the test and a handle bound to it; both go
// when the test ends, pass or fail.
func open(t *testing.T, prefix string) kernel.API {
	t.Helper()
	ns := testns.Temp(t, prefix)
	h, err := linux.Opener{}.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func realWorld(t *testing.T) scene.World {
	t.Helper()
	testns.Require(t)
	return scene.World{
		Node:     open(t, "vpccni-rcnode"),
		NewPodNS: func() (kernel.API, error) { return open(t, "vpccni-rcpod"), nil },
	}
}

func snapshot(t *testing.T, k kernel.API) kernel.State {
	t.Helper()
	s, err := kernel.Snapshot(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForeignRulesSurviveOnLinux: the model's foreign-rules case on the
// real kernel: exactly the orphans and the gone pods' rules are deleted,
// everything else in the namespace is left as it was.
func TestForeignRulesSurviveOnLinux(t *testing.T) {
	w := realWorld(t)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	c, err := scene.ForeignRules(w, now)
	if err != nil {
		t.Fatal(err)
	}
	live, err := reconcile.Rebuild(w.Node, c.Pool.IsPodAddress, c.VethPrefixes)
	if err != nil || !slices.Equal(live, c.Live) {
		t.Fatalf("Rebuild: %v\n got %+v\nwant %+v", err, live, c.Live)
	}
	before := snapshot(t, w.Node)
	rep, err := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: c.Pool, Now: func() time.Time { return now }}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, w.Node)
	for _, p := range c.Check(before, after, rep) {
		t.Error(p)
	}
	if t.Failed() {
		t.Logf("rules after the pass:\n%s", after.Rules)
	}
}

// TestShadowedDeleteHitsTheForeignRule: why the reconciler leaves the
// orphan `512: to 10.0.2.21 lookup main` alone. On Linux a delete request
// matches every rule that has at least its selectors, first in list order,
// so deleting that orphan by its exact description removes the foreign
// `to 10.0.2.21 iif eth0` rule listed before it.
func TestShadowedDeleteHitsTheForeignRule(t *testing.T) {
	w := realWorld(t)
	if _, err := scene.ForeignRules(w, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w.Node)
	if err := w.Node.RuleDel(scene.ToPod(scene.Addr("10.0.2.21"))); err != nil {
		t.Fatal(err)
	}
	_, removed := kernel.Diff(before, snapshot(t, w.Node))
	want := []string{"rule 512: from all to 10.0.2.21 iif eth0 lookup main"}
	if !slices.Equal(removed, want) {
		t.Fatalf("a delete of the orphan removed %q; the reconciler's shadow guard assumes %q", removed, want)
	}
}
