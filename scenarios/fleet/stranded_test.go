package fleet

import (
	"strings"
	"testing"

	"github.com/vpccni/vpccni/scenarios/spec"
)

// ipamd dying in the middle of attaching ENIs, in a fleet that scales
// down: vpccni's leaked-ENI sweep (every 5 minutes) deletes what a
// terminated node left within the window; the reference's hourly sweep
// leaves it (STRANDED, cross-node by nature: only the cluster sees an ENI
// whose node is gone). With vpccni's sweep off (mutant H107) the same
// fleet strands ENIs under vpccni's flow too.
func TestENIAttachCrashesStrand(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/eni-attach-crashes-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := run(t, f, "default", Options{})
	if !def.Match || len(def.Findings) != 0 {
		t.Fatalf("vpccni's flow: want clean, got %v: %+v", def.ByKind, def.Findings)
	}
	if def.Drains == 0 || def.Nodes != 20 {
		t.Fatalf("the fleet did not run as described (no node replaced, some drained): %d nodes, %d drains", def.Nodes, def.Drains)
	}
	old := run(t, f, "ref-v1.11", Options{})
	if !old.Match || old.ByKind[Stranded] == 0 {
		t.Fatalf("ref-v1.11: want STRANDED, got %v", old.ByKind)
	}
	for _, fd := range old.Findings {
		if fd.Kind == Stranded && !strings.Contains(fd.What, "terminated at t=") {
			t.Fatalf("a STRANDED finding that does not say when its node went: %+v", fd)
		}
	}
}
