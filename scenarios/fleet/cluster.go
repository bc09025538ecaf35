package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// Stranded is the cluster's own finding kind: an ENI, with its addresses,
// left in EC2 after its node is gone, beyond the reconciliation window.
const Stranded = "STRANDED"

// strandWindow is how long an ENI of a terminated node may stay before it
// is stranded (the time a cleanup job is given to delete it).
const strandWindow = 10 * time.Minute

// eniLink names the node link of ENI device d, as on an instance.
func eniLink(device int) string { return fmt.Sprintf("eth%d", device) }

// checkTouched runs after every event: the address index already caught
// an address held twice (onHold); here every pod that started holding an
// address is reached, by each node kernel's own route lookup, from its
// own node (to its veth) and from every other node (out of the sending
// pod's own ENI: a rule leaked for its address on that node sends it out
// of another, where the VPC drops it). Each node sends from one running
// pod per ENI device, the lowest by name. Step invariants' findings of
// every node are collected too.
func (w *World) checkTouched() {
	for _, n := range w.nodes {
		for _, v := range n.StepFindings() {
			w.find(n.Name(), v.Kind, v.What)
		}
	}
	touched := w.touched
	w.touched = nil
	if len(touched) == 0 {
		return
	}
	senders := map[string][]senderPod{}
	for _, n := range w.nodes {
		senders[n.Name()] = representatives(n)
	}
	for _, h := range touched {
		if cur, ok := w.index[h.pod.IP]; !ok || cur != h {
			continue // already gone again
		}
		w.reach(h, senders)
	}
}

type senderPod struct {
	name, veth, link string
	ip               netip.Addr
}

func representatives(n *node) []senderPod {
	byDev := map[int]senderPod{}
	for _, p := range n.Running() { // by name
		if _, ok := byDev[p.Device]; !ok {
			byDev[p.Device] = senderPod{name: p.Name, veth: p.HostVeth, link: eniLink(p.Device), ip: p.IP}
		}
	}
	var out []senderPod
	for _, s := range byDev {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].link < out[j].link })
	return out
}

// reach checks the routes to one pod's address from the whole fleet.
func (w *World) reach(h holder, senders map[string][]senderPod) {
	dst := net.IP(h.pod.IP.AsSlice())
	for _, n := range w.nodes {
		k := n.Kernel()
		if n.Name() == h.node {
			res, err := k.RouteGet(kernel.RouteQuery{Dst: dst})
			if err != nil || res.LinkName != h.pod.HostVeth {
				w.find(n.Name(), invariant.Misroute, fmt.Sprintf("traffic to %s (%s) goes to %s, not %s (%v)", h.pod.Name, h.pod.IP, res.LinkName, h.pod.HostVeth, err))
			}
			continue
		}
		for _, s := range senders[n.Name()] {
			res, err := k.RouteGet(kernel.RouteQuery{Dst: dst, Src: net.IP(s.ip.AsSlice()), IifName: s.veth})
			if err == nil && res.LinkName == s.link {
				continue
			}
			w.find(n.Name(), invariant.Misroute, fmt.Sprintf("traffic from %s (%s) to %s (%s on node %s) leaves via %s, not %s (rule %d, table %d)",
				s.name, s.ip, h.pod.IP, h.pod.Name, h.node, res.LinkName, s.link, res.RulePrio, res.Table))
		}
	}
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
		remote := map[netip.Addr]string{}
		for a, h := range w.index {
			if h.node != n.Name() {
				remote[a] = h.pod.Name + ", node " + h.node
			}
		}
		vs, err := n.Check(remote)
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
		addrs := []string{e.PrimaryIP.String()}
		for _, a := range e.IPv4 {
			addrs = append(addrs, a.String())
		}
		w.find("", Stranded, fmt.Sprintf("ENI %s of instance %s, terminated at t=%s, is still available with %d address(es): %s",
			e.ID, id, at, len(addrs), strings.Join(addrs, ", ")))
	}
}
