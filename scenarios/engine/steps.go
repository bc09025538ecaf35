package engine

import (
	"fmt"
	"net/netip"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// stepWatch runs the invariants that must hold after every step
// (invariant.CheckStep) and remembers what they found: an address held
// twice for a moment, or released with its objects still in the kernel,
// is a violation even when the run settles clean.
type stepWatch struct {
	daemon *ipamd.Daemon
	held   map[netip.Addr]bool // ipamd's allocations after the last step
	// handed are those of them a DEL had handed its veth pair over for,
	// with the host veth's ifindex (the hand-over's contract: released
	// only once that veth is gone)
	handed map[netip.Addr]int
	found  []invariant.Violation
	seen   map[string]bool
}

// stepCheck runs after every timeline event, every kubelet DEL attempt and
// every round of ipamd's loops. A release is an address ipamd held after
// the last step and does not now, the same daemon still running: a
// restart without its checkpoint forgets, it does not release.
func (r *run) stepCheck(where string) {
	w := &r.steps1
	cur, handed := map[netip.Addr]bool{}, map[netip.Addr]int{}
	if r.ipamd != nil {
		for _, a := range r.ipamd.Allocations() {
			cur[a.IP] = true
			if a.Releasing {
				handed[a.IP] = a.Meta.HostVethIndex
			}
		}
	}
	var released []netip.Addr
	releasedHanded := map[netip.Addr]int{}
	if r.ipamd != nil && r.ipamd == w.daemon {
		for a := range w.held {
			if !cur[a] {
				released = append(released, a)
				if idx, ok := w.handed[a]; ok {
					releasedHanded[a] = idx
				}
			}
		}
	}
	w.daemon, w.held, w.handed = r.ipamd, cur, handed
	vs, err := invariant.CheckStep(r.world(), released, releasedHanded)
	if err != nil {
		r.note("step check after %s: %v", where, err)
		return
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	for _, v := range vs {
		v.What = fmt.Sprintf("at t=%s (%s): %s", r.now, where, v.What)
		if !w.seen[v.Kind+v.What] {
			w.seen[v.Kind+v.What] = true
			w.found = append(w.found, v)
			r.note("step invariant: %s", v)
		}
	}
}
