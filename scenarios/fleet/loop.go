package fleet

import (
	"container/heap"
	"context"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/internal/failpoint"
)

// kind of a timed action.
type kind int

const (
	createPod kind = iota
	rampPod        // one of the first pods of a ramp-up (pods.rampUp)
	deletePod
	startDrain
	endDrain
	restartIpamd
	eniCrash
	sweep
	strandCheck // a terminated node's ENIs, once the window is over
)

type action struct {
	at   time.Duration
	kind kind
	node string // endDrain: the node
	seq  int    // ties in order of scheduling: runs are reproducible
}

type queue []action

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(action)) }
func (q *queue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

// sweepEvery is how often every node is checked in full.
const sweepEvery = time.Hour

// loop runs the fleet's actions in time order until its duration: each
// a Poisson process of its rate per hour, drawn from the seed.
func (w *World) loop() error {
	q := &queue{}
	seq := 0
	push := func(a action) {
		seq++
		a.seq = seq
		heap.Push(q, a)
	}
	next := func(k kind, perHour int) {
		if perHour <= 0 {
			return
		}
		gap := time.Duration(w.rng.ExpFloat64() / float64(perHour) * float64(time.Hour))
		push(action{at: w.now + max(gap, time.Millisecond), kind: k})
	}
	f := w.f
	next(createPod, f.Pods.CreatePerHour)
	next(deletePod, f.Pods.DeletePerHour)
	next(startDrain, f.Drains.PerHour)
	next(restartIpamd, f.Faults.IpamdRestartsPerHour)
	next(eniCrash, f.Faults.ENIAttachCrashesPerHour)
	if ramp := f.Pods.RampUp.Duration; ramp > 0 {
		total := time.Duration(len(w.nodes) * f.Pods.PerNode)
		for i := range total {
			// ramp*i/total without overflowing: a day is 8.6e13 ns.
			push(action{at: ramp/total*i + ramp%total*i/total, kind: rampPod})
		}
	}
	for t := sweepEvery; t < f.Duration.Duration; t += sweepEvery {
		push(action{at: t, kind: sweep})
	}
	for q.Len() > 0 {
		a := heap.Pop(q).(action)
		if a.at > f.Duration.Duration {
			break
		}
		if err := w.advance(a.at); err != nil {
			return err
		}
		var err error
		switch a.kind {
		case createPod:
			err = w.createPod()
			next(createPod, f.Pods.CreatePerHour)
		case rampPod:
			err = w.createPod()
		case deletePod:
			err = w.deleteRandomPod()
			next(deletePod, f.Pods.DeletePerHour)
		case startDrain:
			// No drain starts that could not end before the fleet does.
			if w.now+f.Drains.Takes.Duration < f.Duration.Duration {
				var n string
				if n, err = w.startDrain(); n != "" {
					push(action{at: w.now + f.Drains.Takes.Duration, kind: endDrain, node: n})
				}
			}
			next(startDrain, f.Drains.PerHour)
		case endDrain:
			err = w.endDrain(a.node)
		case restartIpamd:
			err = w.restartRandomIpamd()
			next(restartIpamd, f.Faults.IpamdRestartsPerHour)
		case eniCrash:
			err = w.armENICrash()
			next(eniCrash, f.Faults.ENIAttachCrashesPerHour)
		case sweep:
			err = w.sweep(false)
		case strandCheck:
			w.checkStrandedOf(a.node)
		}
		if err != nil {
			return err
		}
		for _, p := range w.later {
			push(p)
		}
		w.later = w.later[:0]
		if err := w.afterEvent(); err != nil {
			return err
		}
	}
	return w.advance(f.Duration.Duration)
}

// advance moves every node's clock to t, one after the other: nodes only
// meet in EC2, whose calls within one step of the clock have no order a
// pod could see.
func (w *World) advance(t time.Duration) error {
	if t == 0 || t/time.Hour != w.now/time.Hour {
		// A CPU profile tells the simulated hours apart (go tool pprof
		// -tagfocus hour=0): the first, when every node fills, is unlike
		// the others.
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("hour", strconv.Itoa(int(t/time.Hour)))))
	}
	w.now = t
	for _, n := range w.nodes {
		n.Advance(t)
	}
	if w.opt.Progress != nil {
		w.opt.Progress(t, w.f.Duration.Duration)
	}
	return w.afterEvent()
}

// afterEvent runs the checks of what an event touched.
func (w *World) afterEvent() error {
	if w.opt.Break != nil {
		w.opt.Break(w)
		for _, n := range w.nodes { // (it changes kernels behind the nodes' backs)
			w.markDirty(n)
		}
	}
	return w.checkTouched()
}

// drainTarget picks a node to drain: any not draining, as long as
// another node stays to take its pods.
func (w *World) drainTarget() *node {
	var cands []*node
	for _, n := range w.nodes {
		if !n.draining {
			cands = append(cands, n)
		}
	}
	if len(cands) < 2 {
		return nil
	}
	return cands[w.rng.IntN(len(cands))]
}

// startDrain is cluster-autoscaler scaling a node down: aws-node evicted
// first when misconfigured, then every pod, each recreated elsewhere.
func (w *World) startDrain() (string, error) {
	n := w.drainTarget()
	if n == nil {
		return "", nil
	}
	w.res.Drains++
	n.draining = true
	n.log(w.now, "autoscaler drains the node")
	if w.f.Drains.EvictAwsNodeFirst {
		if err := n.Evict(); err != nil {
			return "", err
		}
	}
	for _, p := range n.Running() {
		if err := n.Delete(p.Name); err != nil {
			return "", err
		}
		if err := w.createPod(); err != nil {
			return "", err
		}
	}
	return n.Name(), nil
}

// endDrain cancels the scale-down (aws-node comes back) for
// cancelPercent of the drains, or terminates the node's instance and
// launches a new node in its group.
func (w *World) endDrain(name string) error {
	n := w.byName[name]
	if n == nil {
		return nil
	}
	if w.rng.IntN(100) < w.f.Drains.CancelPercent {
		n.log(w.now, "autoscaler cancels the scale-down")
		n.draining = false
		if !n.IpamdUp() {
			return n.CancelEviction(w.f.Drains.Memory)
		}
		return nil
	}
	return w.terminate(n)
}

// terminate ends a node's instance: its pods go with it, EC2 deletes the
// ENIs marked DeleteOnTermination and keeps the others; a new node of
// its group joins.
func (w *World) terminate(n *node) error {
	n.log(w.now, "instance terminated")
	for a, h := range w.index {
		if h.node == n.Name() {
			delete(w.index, a)
		}
	}
	for k, v := range n.Calls() {
		w.calls[k] += v
	}
	n.Close()
	if err := w.vpc.Terminate(n.InstanceID()); err != nil {
		return err
	}
	w.terminated[n.InstanceID()] = w.now
	// Its ENIs left in EC2 are looked at once the window is over: a
	// cleanup's whole time, and no more.
	w.later = append(w.later, action{at: w.now + strandWindow, kind: strandCheck, node: n.InstanceID()})
	delete(w.byName, n.Name())
	w.forget(n.Name())
	for i, o := range w.nodes {
		if o == n {
			w.nodes = append(w.nodes[:i], w.nodes[i+1:]...)
			break
		}
	}
	if !w.f.Drains.Replaces() {
		return nil
	}
	_, err := w.launch(n.group)
	return err
}

// randomUpNode is a node whose ipamd runs, drawn at random (nil: none).
func (w *World) randomUpNode() *node {
	var cands []*node
	for _, n := range w.nodes {
		if n.IpamdUp() {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.rng.IntN(len(cands))]
}

func (w *World) restartRandomIpamd() error {
	n := w.randomUpNode()
	if n == nil {
		return nil
	}
	n.log(w.now, "ipamd crashes, checkpoint %s", w.f.Faults.Memory)
	return n.Restart(w.f.Faults.Memory)
}

// attachCrashPoints are where ipamd may die attaching an ENI.
var attachCrashPoints = []failpoint.Name{cloud.FailAllocBeforeAttach, cloud.FailAllocBeforeDeleteOnTermination}

// armENICrash has ipamd on a random node die the next time it attaches an
// ENI, at one of the two points at random.
func (w *World) armENICrash() error {
	n := w.randomUpNode()
	if n == nil {
		return nil
	}
	point := attachCrashPoints[w.rng.IntN(len(attachCrashPoints))]
	n.log(w.now, "ipamd will die at %s the next time it attaches an ENI", point)
	return n.ArmCrash(point)
}

// end lets every node settle (kubelet's retries, ipamd's reconciler) and
// checks everything once more.
func (w *World) end() error {
	for _, n := range w.nodes {
		n.Finish()
		w.now = max(w.now, n.Now())
	}
	if err := w.advance(w.now); err != nil {
		return err
	}
	for _, n := range w.nodes {
		for k, v := range n.Calls() {
			w.calls[k] += v
		}
	}
	return w.sweep(true)
}
