package fleet

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// Stranded is the cluster's own finding kind: an ENI, with its addresses,
// left in EC2 after its node is gone, beyond the reconciliation window.
const Stranded = "STRANDED"

// strandWindow is how long an ENI of a terminated node may stay before it
// is stranded (the time a cleanup job is given to delete it).
const strandWindow = 10 * time.Minute

// checkTouched runs after every event: the address index already caught
// an address held twice (onHold); here routing is checked where the
// event can have changed it, by each node kernel's own lookups
// (invariant.CheckRouting), without walking the whole cluster:
//   - on every node whose kernel changed: traffic to the pods that started
//     holding an address there goes to their veths, and traffic from one
//     running pod per ENI device (the lowest by name) leaves by that ENI
//     for every address a pod on another node holds that the node names in
//     a rule or route of its own, and for a stand-in of every other class
//     of VPC addresses (views.go);
//   - on every other node that names, in a rule or route, an address a pod
//     elsewhere has just started holding: traffic to it leaves by the
//     sender's own ENI (a rule leaked for it there sends it out of
//     another, where the VPC drops it).
//
// Step invariants' findings of every node are collected too.
func (w *World) checkTouched() error {
	touched := w.touched
	w.touched = nil
	onNode := map[string][]string{}
	for _, h := range touched {
		if cur, ok := w.index[h.pod.IP]; ok && cur == h {
			onNode[h.node] = append(onNode[h.node], h.pod.Name)
			w.markDirty(w.byName[h.node])
		}
	}
	dirty := w.takeDirty()
	for _, n := range dirty {
		for _, v := range n.StepFindings() {
			w.find(n.Name(), v.Kind, v.What)
		}
	}
	changed := map[string]bool{}
	for _, n := range dirty {
		v := w.views[n.Name()]
		if v != nil && v.gen == n.Generation() && len(onNode[n.Name()]) == 0 {
			continue
		}
		if err := w.refreshView(n); err != nil {
			return err
		}
		changed[n.Name()] = true
		pods := append(senders(n), onNode[n.Name()]...)
		w.findAll(n.Name(), n.CheckRouting(pods, w.remoteFor(n)))
	}
	for _, h := range touched {
		if cur, ok := w.index[h.pod.IP]; !ok || cur != h {
			continue // already gone again
		}
		var names []string // (in order: runs of a seed read the same)
		for name := range w.mentions[h.pod.IP] {
			if name != h.node && !changed[name] {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			n := w.byName[name]
			w.findAll(name, n.CheckRouting(senders(n), map[netip.Addr]string{h.pod.IP: heldBy(h)}))
		}
	}
	return nil
}

// markDirty notes that a node may have changed since the last check
// (engine.NodeConfig.OnChange): only such nodes can have new step
// findings or a kernel of another generation, so the check after an
// event looks at them alone, not at a thousand idle nodes.
func (w *World) markDirty(n *node) {
	if n != nil && !n.dirty {
		n.dirty = true
		w.dirty = append(w.dirty, n)
	}
}

// takeDirty returns the running nodes marked dirty, in the order they
// joined (the order of w.nodes), and clears the marks.
func (w *World) takeDirty() []*node {
	out := w.dirty[:0:0]
	for _, n := range w.dirty {
		n.dirty = false
		if w.byName[n.Name()] == n {
			out = append(out, n)
		}
	}
	w.dirty = w.dirty[:0]
	sort.Slice(out, func(i, j int) bool { return out[i].joined < out[j].joined })
	return out
}

func heldBy(h holder) string { return h.pod.Name + " on node " + h.node }

func (w *World) findAll(node string, vs []invariant.Violation) {
	for _, v := range vs {
		w.find(node, v.Kind, v.What)
	}
}

// refreshView reads a node's kernel again and keeps the index of which
// nodes name which single address.
func (w *World) refreshView(n *node) error {
	v, err := readView(n.Kernel(), w.vpc.CIDRs(), n.Generation())
	if err != nil {
		return fmt.Errorf("node %s: reading its rules and routes: %w", n.Name(), err)
	}
	// Between two readings a node's rules and routes name nearly the same
	// addresses (an ADD adds one): only the difference moves in mentions.
	name := n.Name()
	old := w.views[name]
	for a := range v.hosts {
		if old != nil && old.hosts[a] {
			continue
		}
		if w.mentions[a] == nil {
			w.mentions[a] = map[string]bool{}
		}
		w.mentions[a][name] = true
	}
	if old != nil {
		for a := range old.hosts {
			if !v.hosts[a] {
				w.unmention(a, name)
			}
		}
	}
	w.views[name] = v
	return nil
}

// forget drops a node's view (it changed, or it is gone).
func (w *World) forget(name string) {
	old := w.views[name]
	if old == nil {
		return
	}
	for a := range old.hosts {
		w.unmention(a, name)
	}
	delete(w.views, name)
}

// unmention drops node name from the nodes that name address a.
func (w *World) unmention(a netip.Addr, name string) {
	delete(w.mentions[a], name)
	if len(w.mentions[a]) == 0 {
		delete(w.mentions, a)
	}
}

// remoteFor are the destinations that stand for every address of the
// cluster in a node's lookups: those it names singly that a pod on
// another node holds, and the stand-ins of the rest.
func (w *World) remoteFor(n *node) map[netip.Addr]string {
	v := w.views[n.Name()]
	remote := map[netip.Addr]string{}
	for a := range v.hosts {
		if h, ok := w.index[a]; ok && h.node != n.Name() {
			remote[a] = heldBy(h)
		}
	}
	for _, a := range v.standIns {
		if _, ok := remote[a]; !ok {
			remote[a] = standInName(n.Name())
		}
	}
	return remote
}

// senders are a node's running pods that send, one per ENI device: the
// lowest by name.
func senders(n *node) []string {
	byDev := map[int]bool{}
	var out []string
	for _, p := range n.Running() { // by name
		if !byDev[p.Device] {
			byDev[p.Device] = true
			out = append(out, p.Name)
		}
	}
	return out
}

// sweep checks every node in full (its kernel clean of deleted pods,
// ipamd's allocations, routing from its pods to every address of the
// cluster) and EC2 for stranded ENIs. Mid-run a node is caught in the
// middle of things (a pod's DEL being retried, aws-node evicted): a
// finding counts once a second sweep, an hour later, finds it again, or
// at the end, once every node has settled (final).
func (w *World) sweep(final bool) error {
	prev := w.lastSweep
	w.lastSweep = map[string]bool{}
	for _, n := range w.nodes {
		if n.draining && !final {
			continue
		}
		if err := w.refreshView(n); err != nil {
			return err
		}
		vs, err := n.Check(w.remoteFor(n))
		if err != nil {
			return err
		}
		for _, v := range vs {
			key := n.Name() + "\x00" + v.Kind + "\x00" + v.What
			w.lastSweep[key] = true
			if final || prev[key] {
				w.find(n.Name(), v.Kind, v.What)
			}
		}
	}
	w.checkStranded(final)
	return nil
}

// checkStranded: no ENI of a terminated node is left available in EC2
// beyond the window (at the end: whatever the window).
func (w *World) checkStranded(final bool) {
	for _, e := range w.vpc.AvailableENIs() {
		id := e.Tags[cloud.TagInstanceID]
		at, gone := w.terminated[id]
		if !gone || (!final && w.now-at < strandWindow) {
			continue
		}
		w.stranded(e, id, at)
	}
}

// checkStrandedOf runs when the window of a terminated instance is over:
// an ENI of it still available has outlived the window, even if a sweep
// an hour later would no longer find it.
func (w *World) checkStrandedOf(instanceID string) {
	for _, e := range w.vpc.AvailableENIs() {
		if e.Tags[cloud.TagInstanceID] == instanceID {
			w.stranded(e, instanceID, w.terminated[instanceID])
		}
	}
}

func (w *World) stranded(e memory.StrandedENI, instanceID string, at time.Duration) {
	addrs := []string{e.PrimaryIP.String()}
	for _, a := range e.IPv4 {
		addrs = append(addrs, a.String())
	}
	w.find("", Stranded, fmt.Sprintf("ENI %s of instance %s, terminated at t=%s, is still available with %d address(es): %s",
		e.ID, instanceID, at, len(addrs), strings.Join(addrs, ", ")))
}
