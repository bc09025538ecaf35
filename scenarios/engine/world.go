package engine

import (
	"sort"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// world is the node as the invariants see it: its kernel, its pods by
// phase (every sandbox ever removed among the deleted), ipamd's
// allocations with the sandbox each belongs to, and its host NAT once an
// ipamd has started.
func (r *run) world() invariant.World {
	w := invariant.World{Node: r.node, Remote: r.remote, OffVPC: OffVPC, ENILink: eniLink, NamespaceExists: r.kern.HasNamespace,
		Foreign: r.foreign}
	if r.natStarted {
		w.NAT, w.NATPlan, w.NATMark, w.NATForeign = r.nat, r.natWant, hostnat.DefaultMark, foreignNAT
	}
	names := make([]string, 0, len(r.pods))
	for n := range r.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := r.pods[n]
		ip := r.invPod(n, p)
		switch p.phase {
		case running:
			w.Live = append(w.Live, ip)
		case terminating:
			if p.wantRun {
				// A failed ADD's sandbox the runtime kept: its objects are
				// the retried DEL's to remove.
				w.Pending = append(w.Pending, ip)
			} else if p.ip.IsValid() {
				w.Deleted = append(w.Deleted, ip)
			}
		}
	}
	w.Deleted = append(w.Deleted, r.gone...)
	w.Pending = append(w.Pending, r.lost...)
	if r.ipamd != nil {
		w.IpamdUp = true
		for _, a := range r.ipamd.Allocations() {
			w.Allocations = append(w.Allocations, invariant.Allocation{ContainerID: r.holderOf(a.Key), IP: a.IP})
		}
	}
	return w
}

// invPod is the pod as the invariants know it.
func (r *run) invPod(name string, p *pod) invariant.Pod {
	return invariant.Pod{Name: name, ContainerID: p.containerID, IP: p.ip, Device: p.device, HostVeth: p.hostVeth, Netns: p.netns,
		VlanID: p.vlan, Strict: r.mode == ModeBranchStrict}
}

// holderOf is the sandbox an allocation belongs to. An allocation ipamd
// rebuilt from the kernel is keyed by the pod's host veth: it is the
// sandbox's whose veth that is, if that sandbox still runs.
func (r *run) holderOf(k datastore.Key) string {
	if !k.Recovered() {
		return k.ContainerID
	}
	for _, p := range r.pods {
		if p.phase == running && p.hostVeth == k.ContainerID {
			return p.containerID
		}
	}
	for _, p := range r.lost { // a sandbox the runtime lost, still alive
		if p.HostVeth == k.ContainerID {
			return p.ContainerID
		}
	}
	return k.ContainerID
}
