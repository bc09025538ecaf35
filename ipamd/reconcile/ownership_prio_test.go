package reconcile_test

import (
	"testing"

	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/reconcile/internal/scene"
	"github.com/vpccni/vpccni/kernel"
)

// TestOwnsOnlyPodPriorities: a rule of the exact pod shape (to <pool
// address> lookup main, from <pool address> lookup <pod table>) at any
// priority other than 512/1536 is somebody else's, and the reconciler
// must never delete it.
func TestOwnsOnlyPodPriorities(t *testing.T) {
	pool := scene.NewPool(scene.Ranges...)
	pod := scene.Addr("10.0.1.5")
	for _, prio := range []int{0, 10, 100, 511, 513, 1000, 1535, 1537, 32765, 32766} {
		for _, r := range []kernel.Rule{scene.ToPod(pod), scene.FromPod(pod, 3)} {
			r.Priority = prio
			if o, ok := reconcile.Owns(r, pool.IsPodAddress); ok {
				t.Errorf("Owns(%s) = %+v, want not owned", kernel.RuleString(r), o)
			}
		}
	}
}
