package fleet

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// The narrowed destinations (the addresses a node names singly, held
// elsewhere, and a stand-in per class of the rest) find a misroute for
// exactly the senders every held address of the cluster finds one for:
// checked every five simulated minutes of the 20-node hour under the
// leaking ref-v1.11 flow, on every node.
func TestNarrowedRoutingAgreesWithFull(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/autoscaler-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	next, compared, misrouted := time.Duration(0), 0, 0
	brk := func(w *World) {
		if w.now < next {
			return
		}
		next = w.now + 5*time.Minute
		for _, n := range w.nodes {
			if err := w.refreshView(n); err != nil {
				t.Fatal(err)
			}
			full := map[netip.Addr]string{}
			for a, h := range w.index {
				if h.node != n.Name() {
					full[a] = heldBy(h)
				}
			}
			pods := senders(n)
			want := sendersFound(n.CheckRouting(pods, full))
			got := sendersFound(n.CheckRouting(pods, w.remoteFor(n)))
			if strings.Join(want, ",") != strings.Join(got, ",") {
				t.Errorf("t=%s node %s: every held address finds misroutes from %v, the narrowed ones from %v", w.now, n.Name(), want, got)
			}
			compared++
			misrouted += len(want)
		}
	}
	run(t, f, "ref-v1.11", Options{Break: brk})
	if misrouted == 0 {
		t.Fatalf("%d comparisons and no misroute among them: the test shows nothing", compared)
	}
	t.Logf("%d node comparisons, %d senders misrouting", compared, misrouted)
}

// sendersFound are the pods whose traffic a finding says is misrouted.
func sendersFound(vs []invariant.Violation) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		name, _, _ := strings.Cut(strings.TrimPrefix(v.What, "traffic from "), " (")
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// Two runs of one seed give the same result, findings in the same order
// (sharded and unsharded runs are compared byte for byte).
func TestRunsOfASeedAreIdentical(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/autoscaler-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := json.Marshal(run(t, f, "ref-v1.11", Options{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(run(t, f, "ref-v1.11", Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs of seed %d differ:\n%s\n%s", f.Seed, a, b)
	}
}

// The index of which nodes name an address (mentions), kept by the
// difference between a node's old and new view, is always what the views
// say: checked after every event of the 20-node hour under ref-v1.11,
// whose leaked rules keep addresses named after their pods are gone.
func TestMentionsFollowTheViews(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/autoscaler-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	brk := func(w *World) {
		want := map[netip.Addr]map[string]bool{}
		for name, v := range w.views {
			for a := range v.hosts {
				if want[a] == nil {
					want[a] = map[string]bool{}
				}
				want[a][name] = true
			}
		}
		if len(want) != len(w.mentions) {
			t.Fatalf("t=%s: %d addresses mentioned, the views name %d", w.now, len(w.mentions), len(want))
		}
		for a, names := range want {
			if len(w.mentions[a]) != len(names) {
				t.Fatalf("t=%s: %s mentioned by %v, named in the views of %v", w.now, a, w.mentions[a], names)
			}
			for name := range names {
				if !w.mentions[a][name] {
					t.Fatalf("t=%s: %s mentioned by %v, named in the views of %v", w.now, a, w.mentions[a], names)
				}
			}
		}
		checked++
	}
	run(t, f, "ref-v1.11", Options{Break: brk})
	if checked == 0 {
		t.Fatal("no event checked")
	}
}
