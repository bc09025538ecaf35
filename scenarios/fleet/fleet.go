// Package fleet runs many nodes in one process: each the node a scenario
// runs (kernel model, ipamd on its own socket and checkpoint, the plugin
// through libcni, kubelet's retries; package engine), all launched into
// one in-memory VPC, so an address one node gives back to EC2 is the next
// another node gets. Pods are created, deleted and rescheduled; the
// cluster autoscaler drains nodes (evicting aws-node first when
// misconfigured) and cancels or terminates; ipamd restarts. The cluster
// invariants (cluster.go) are checked as it goes: the harm of #2048 is
// cross-node, a rule leaked on one node misrouting traffic to the address
// a pod on another node now holds.
package fleet

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Options tune a fleet run.
type Options struct {
	Log *slog.Logger
	// Progress hears the simulated time done out of the duration.
	Progress func(done, total time.Duration)
	// Break, when set, runs on the world after every event: tests break
	// it and watch a cluster invariant fire.
	Break func(w *World)
	// EveryTick runs every node's ipamd loops on every tick, the idle
	// ones included (engine.Options.EveryTick): tests compare.
	EveryTick bool
}

// Finding is one cluster or node invariant violated.
type Finding struct {
	At   time.Duration `json:"at"`
	Node string        `json:"node,omitempty"`
	Kind string        `json:"kind"`
	What string        `json:"what"`
}

// NodeReport is a node's state when the run's first finding was made.
type NodeReport struct {
	Node    string   `json:"node"`
	At      string   `json:"at"`
	Finding string   `json:"finding"`
	Kernel  []string `json:"kernel"`
	Recent  []string `json:"recent"` // the node's last events
}

// Result is a fleet run under one policy.
type Result struct {
	Fleet    string         `json:"fleet"`
	Policy   string         `json:"policy"`
	Seed     int64          `json:"seed"`
	Duration string         `json:"duration"`
	Nodes    int            `json:"nodes"` // every node that ever ran
	Pods     int            `json:"pods"`  // every pod created
	Drains   int            `json:"drains"`
	Calls    map[string]int `json:"calls"` // CNI invocations by command
	Findings []Finding      `json:"findings,omitempty"`
	ByKind   map[string]int `json:"byKind,omitempty"`
	First    *NodeReport    `json:"first,omitempty"`
	Expected []string       `json:"expected"`
	Match    bool           `json:"match"`
}

// node is one node of the world.
type node struct {
	*engine.Node
	group    *spec.NodeGroup
	maxPods  int
	draining bool
	recent   []string
	joined   int  // launch number: the order nodes are checked in
	dirty    bool // changed since the last check (World.dirty)
}

// World is the fleet as it runs.
type World struct {
	f      *spec.Fleet
	pol    policy.Policy
	opt    Options
	vpc    *memory.VPC
	rng    *rand.Rand
	now    time.Duration
	nodes  []*node // running, in order of joining
	byName map[string]*node
	// views are what was read of each node's kernel, and mentions which
	// nodes name each single address in a rule or route (views.go).
	views    map[string]*view
	mentions map[netip.Addr]map[string]bool
	// index holds every address a running pod holds, cluster-wide.
	index map[netip.Addr]holder
	// touched are the pods that started holding an address since the
	// last cluster check, and dirty the nodes that may have changed.
	touched []holder
	dirty   []*node
	// terminated are the instances terminated, with when.
	terminated map[string]time.Duration
	// later are actions an event scheduled (loop queues them).
	later    []action
	seq      int // pods created, naming them
	launched int
	res      *Result
	seen     map[string]bool
	// lastSweep are the node findings of the last sweep (sweep).
	lastSweep map[string]bool
	calls     map[string]int
}

type holder struct {
	node string
	pod  engine.PodInfo
}

// Run runs the fleet under pol.
func Run(f *spec.Fleet, pol policy.Policy, opt Options) (*Result, error) {
	exp, ok := f.Expect[pol.Name()]
	if !ok {
		return nil, fmt.Errorf("%s: no expectation for policy %s", f.Name, pol.Name())
	}
	blocks := f.VPCBlocks()
	vpc, err := memory.NewVPC(memory.VPCOptions{CIDR: blocks[0], Secondary: blocks[1:]})
	if err != nil {
		return nil, err
	}
	w := &World{f: f, pol: pol, opt: opt, vpc: vpc, rng: rand.New(rand.NewPCG(uint64(f.Seed), 0x666c656574)),
		index: map[netip.Addr]holder{}, byName: map[string]*node{}, views: map[string]*view{}, mentions: map[netip.Addr]map[string]bool{},
		terminated: map[string]time.Duration{}, seen: map[string]bool{}, calls: map[string]int{},
		res: &Result{Fleet: f.Name, Policy: pol.Name(), Seed: f.Seed, Duration: f.Duration.String(), Expected: exp, ByKind: map[string]int{}}}
	defer w.close()
	for gi := range f.NodeGroups {
		g := &f.NodeGroups[gi]
		for range g.Nodes {
			if _, err := w.launch(g); err != nil {
				return nil, err
			}
		}
	}
	if f.Pods.RampUp.Duration == 0 {
		for range w.nodes {
			for range f.Pods.PerNode {
				if err := w.createPod(); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := w.loop(); err != nil {
		return nil, err
	}
	if err := w.end(); err != nil {
		return nil, err
	}
	for _, fd := range w.res.Findings {
		w.res.ByKind[fd.Kind]++
	}
	w.res.Calls = w.calls
	w.res.Match = matches(exp, w.res.ByKind)
	return w.res, nil
}

// matches: [clean] wants no finding; otherwise every kind listed appears.
func matches(exp []string, byKind map[string]int) bool {
	if len(exp) == 1 && exp[0] == "clean" {
		return len(byKind) == 0
	}
	for _, k := range exp {
		if byKind[strings.ToUpper(k)] == 0 {
			return false
		}
	}
	return true
}

// launch adds a node of group g at the world's time.
func (w *World) launch(g *spec.NodeGroup) (*node, error) {
	w.launched++
	name := fmt.Sprintf("%s-%03d", g.Name, w.launched)
	lim, _ := cloud.LimitsOf(g.Node.InstanceType)
	max := g.MaxPods
	if max == 0 {
		max = lim.ENIs * (lim.IPv4PerENI - 1)
	}
	n := &node{group: g, maxPods: max, joined: w.launched}
	en, err := engine.NewNode(engine.NodeConfig{Name: name, Node: g.Node, Mode: "ipv4", Policy: w.pol, Launch: w.vpc.Launch, At: w.now,
		Log: w.opt.Log, OnHold: w.onHold, EveryTick: w.opt.EveryTick, OnChange: func() { w.markDirty(n) }})
	if err != nil {
		return nil, err
	}
	n.Node = en
	w.markDirty(n)
	w.nodes = append(w.nodes, n)
	w.byName[name] = n
	w.res.Nodes++
	return n, nil
}

func (n *node) log(at time.Duration, format string, a ...any) {
	const keep = 40
	n.recent = append(n.recent, fmt.Sprintf("t=%s ", at)+fmt.Sprintf(format, a...))
	if len(n.recent) > keep {
		n.recent = n.recent[len(n.recent)-keep:]
	}
}

// onHold keeps the cluster's address index: an address held by a second
// running pod anywhere is found at once.
func (w *World) onHold(nodeName string, p engine.PodInfo, held bool) {
	h := holder{node: nodeName, pod: p}
	if n := w.byName[nodeName]; n != nil {
		n.log(w.now, "%s %s %s (device %d)", p.Name, map[bool]string{true: "holds", false: "lets go of"}[held], p.IP, p.Device)
	}
	if !held {
		if cur, ok := w.index[p.IP]; ok && cur.node == nodeName && cur.pod.Name == p.Name {
			delete(w.index, p.IP)
		}
		return
	}
	if cur, ok := w.index[p.IP]; ok && (cur.node != nodeName || cur.pod.Name != p.Name) {
		w.find(nodeName, invariant.DoubleAssign, fmt.Sprintf("%s held by %s (node %s) and %s (node %s)", p.IP, cur.pod.Name, cur.node, p.Name, nodeName))
	}
	w.index[p.IP] = h
	w.touched = append(w.touched, h)
}

// find records a finding once (the same text again is the same finding).
func (w *World) find(nodeName, kind, what string) {
	if w.seen[kind+"\x00"+nodeName+"\x00"+what] {
		return
	}
	w.seen[kind+"\x00"+nodeName+"\x00"+what] = true
	w.res.Findings = append(w.res.Findings, Finding{At: w.now, Node: nodeName, Kind: kind, What: what})
	if w.res.First != nil {
		return
	}
	rep := &NodeReport{Node: nodeName, At: w.now.String(), Finding: kind + ": " + what}
	if n := w.byName[nodeName]; n != nil {
		rep.Kernel, rep.Recent = n.Snapshot(), append([]string(nil), n.recent...)
	}
	w.res.First = rep
}

func (w *World) close() {
	for _, n := range w.nodes {
		n.Close()
	}
}

// leastLoaded is the node a new pod goes to: of those not draining with
// room, the one with fewest pods, the first joined on a tie (nil: none).
func (w *World) leastLoaded() *node {
	var best *node
	bestPods := 0
	for _, n := range w.nodes {
		if n.draining {
			continue
		}
		if c := n.Pods(); c < n.maxPods && (best == nil || c < bestPods) {
			best, bestPods = n, c
		}
	}
	return best
}

// createPod places a new pod on the least loaded node that has room; a
// full fleet leaves it pending (not counted).
func (w *World) createPod() error {
	n := w.leastLoaded()
	if n == nil {
		return nil
	}
	w.seq++
	name := fmt.Sprintf("apps/pod-%06d", w.seq)
	n.log(w.now, "schedule %s", name)
	w.res.Pods++
	return n.Add(name)
}

// deleteRandomPod deletes a running pod of a node not being drained, each
// alike likely: the i-th of them in the nodes' order and each node's
// pods by name, without listing the cluster's pods (a day's fleet deletes
// tens of thousands of pods from among a hundred thousand).
func (w *World) deleteRandomPod() error {
	total := 0
	for _, n := range w.nodes {
		if !n.draining {
			total += len(n.Running())
		}
	}
	if total == 0 {
		return nil
	}
	i := w.rng.IntN(total)
	for _, n := range w.nodes {
		if n.draining {
			continue
		}
		pods := n.Running()
		if i >= len(pods) {
			i -= len(pods)
			continue
		}
		name := pods[i].Name
		n.log(w.now, "delete %s", name)
		return n.Delete(name)
	}
	return nil
}
