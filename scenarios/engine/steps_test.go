package engine

import (
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// A round of ipamd's loops that releases an address must be checked (a
// release with the pod's rules left is an early release) even when the
// kernel did not change and no ADD ran in that round: the check after an
// idle round is skipped only while ipamd's allocations have not moved
// either.
func TestIdleRoundStillSeesARelease(t *testing.T) {
	vpc, err := memory.NewVPC(memory.VPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeConfig{Name: "n1", Mode: "ipv4", Policy: policy.Default{}, Launch: vpc.Launch,
		Node: spec.Node{InstanceType: "m5.large", Start: "fresh", KubeletRetries: 5, WarmPool: &spec.WarmPool{WarmIPTarget: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Advance(30 * time.Second) // the warm pool grows
	if err := n.Add("default/web-1"); err != nil {
		t.Fatal(err)
	}
	n.Advance(time.Minute)
	if len(n.Running()) != 1 {
		t.Fatalf("web-1 does not run: %+v", n.Running())
	}
	if vs := n.StepFindings(); len(vs) != 0 {
		t.Fatalf("findings before the release: %v", vs)
	}
	// ipamd forgets the pod behind the kernel's back (as a wrong
	// reconciler pass would), between two rounds of its loops.
	allocs := n.r.ipamd.Allocations()
	if len(allocs) != 1 {
		t.Fatalf("allocations %+v", allocs)
	}
	gen := n.Generation()
	if _, err := n.r.ipamd.Datastore().ReleaseKey(allocs[0].Key); err != nil {
		t.Fatal(err)
	}
	n.Advance(time.Minute + 10*time.Second)
	if n.Generation() != gen {
		t.Fatalf("the kernel changed (%d -> %d): the round is not idle", gen, n.Generation())
	}
	// The round's check ran and saw the release (an address the pod
	// still holds is its own, so that is no finding here: what matters is
	// that the check looked, as it must for a release with rules left).
	if n.r.steps1.held[allocs[0].IP] {
		t.Fatalf("the check after the idle round was skipped: it still believes ipamd holds %s", allocs[0].IP)
	}
}
