package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Node is one node of a fleet: the same node a scenario runs (kernel
// model, ipamd on its own socket and checkpoint, the plugin through
// libcni, kubelet's retries), without a timeline of its own. The fleet
// (package fleet) drives it event by event on a clock it shares with the
// other nodes, and its instance lives in a VPC the nodes share, so an
// address one node gives back is the next another node gets.
type Node struct {
	r    *run
	name string
	// due is when the node next has work of its own (dueAt); dueKnown is
	// false once something may have moved it.
	due      time.Duration
	dueKnown bool
	// pods caches Running and Pods while no pod moved (run.podsVer): a
	// fleet asks every node on every pod it places, and a node's pods
	// include its whole history.
	pods     podsView
	onChange func()
}

// podsView is what Running and Pods answer, read once per change.
type podsView struct {
	known   bool
	ver     uint64 // run.podsVer when read
	running []PodInfo
	count   int
}

// changed forgets when the node next has work.
func (n *Node) changed() {
	n.dueKnown = false
	if n.onChange != nil {
		n.onChange()
	}
}

// NodeConfig describes one node of a fleet.
type NodeConfig struct {
	// Name is the node's name in findings and reports.
	Name string
	// Node is its instance type, warm pool and kubelet settings (a fleet's
	// nodes start "fresh": the warm pool grows them).
	Node spec.Node
	// Mode is the pod networking mode (ipv4).
	Mode   string
	Policy policy.Policy
	// Launch starts the node's instance in the fleet's VPC.
	Launch func(instanceType string, opt memory.Options) (*memory.Cloud, error)
	// At is when the node joins, on the fleet's clock.
	At  time.Duration
	Log *slog.Logger
	// OnHold hears a pod start (held) or stop holding its address, from
	// the ADD that gave it to the DEL that ends it (kubelet's retries of a
	// failed ADD included, which run inside Advance).
	OnHold func(node string, pod PodInfo, held bool)
	// EveryTick runs ipamd's loops on every tick (Options.EveryTick).
	EveryTick bool
	// OnChange hears that the node may have changed (an event on it, or
	// an Advance that ran something): a fleet re-checks only such nodes.
	OnChange func()
}

// PodInfo is a pod as the fleet sees it.
type PodInfo struct {
	Name     string
	IP       netip.Addr
	Device   int
	HostVeth string
}

// NewNode starts a node: its instance, its namespace, ipamd.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Mode != "ipv4" {
		return nil, fmt.Errorf("node %s: mode %q: a fleet runs ipv4 nodes (an IPv6 node's addresses come from its own prefix, so no address moves between nodes)", cfg.Name, cfg.Mode)
	}
	if cfg.Launch == nil {
		return nil, fmt.Errorf("node %s: no VPC to launch its instance in", cfg.Name)
	}
	n := cfg.Node
	n.Start = "fresh"
	s := &spec.Scenario{Name: cfg.Name, Modes: []string{cfg.Mode}, Node: n}
	r, err := newRunAt(s, cfg.Mode, cfg.Policy, Options{Log: cfg.Log, Quiet: true, Tolerant: true, EveryTick: cfg.EveryTick, launch: cfg.Launch}, cfg.At)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	node := &Node{r: r, name: cfg.Name, onChange: cfg.OnChange}
	if cfg.OnHold != nil {
		r.onHold = func(name string, p *pod, held bool) { cfg.OnHold(cfg.Name, node.info(name, p), held) }
	}
	return node, nil
}

func (n *Node) info(name string, p *pod) PodInfo {
	return PodInfo{Name: name, IP: p.ip, Device: p.device, HostVeth: p.hostVeth}
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

// InstanceID is its instance's.
func (n *Node) InstanceID() string { return n.r.cloud.InstanceID() }

// Cloud is the node's instance's EC2 and IMDS.
func (n *Node) Cloud() *memory.Cloud { return n.r.cloud }

// Kernel is the node namespace.
func (n *Node) Kernel() kernel.API { return n.r.node }

// Now is the node's clock.
func (n *Node) Now() time.Duration { return n.r.now }

// IpamdUp reports whether aws-node runs.
func (n *Node) IpamdUp() bool { return n.r.ipamd != nil }

// Add runs a new pod's sandbox. A failed ADD is kubelet's to retry (on
// ipamd's ticks); it is not an error of the fleet.
func (n *Node) Add(name string) error {
	if _, ok := n.r.pods[name]; ok {
		return fmt.Errorf("node %s: pod %s exists", n.name, name)
	}
	ns, pn, ok := strings.Cut(name, "/")
	if !ok {
		return fmt.Errorf("node %s: pod name %q is not namespace/name", n.name, name)
	}
	n.r.pods[name] = &pod{spec: spec.Pod{Name: name}, ns: ns, name: pn, unpinned: true}
	n.r.movedPods()
	return n.step("add "+name, spec.Event{Add: []spec.PodRef{{Name: name}}})
}

// Delete has kubelet delete a pod (a DEL, retried with back-off).
func (n *Node) Delete(name string) error {
	return n.step("delete "+name, spec.Event{Delete: []string{name}})
}

// Evict is the autoscaler evicting aws-node.
func (n *Node) Evict() error { return n.step("evict aws-node", spec.Event{Evict: "aws-node"}) }

// CancelEviction starts aws-node again, its checkpoint as memory says
// (kept, lost, corrupt).
func (n *Node) CancelEviction(memory string) error {
	return n.step("cancel eviction", spec.Event{CancelEviction: "aws-node", Memory: memory})
}

// Restart is ipamd crashing and restarting with its checkpoint as memory
// says.
func (n *Node) Restart(memory string) error {
	return n.step("ipamd restarts", spec.Event{Restart: "ipamd", Memory: memory})
}

func (n *Node) step(what string, ev spec.Event) error {
	n.changed()
	err := n.r.event(ev)
	var na inapplicable
	if err != nil && !errors.As(err, &na) { // (a delete of a pod already gone: nothing to do)
		return fmt.Errorf("node %s: %s: %w", n.name, what, err)
	}
	n.r.watchIpamd()
	n.r.stepCheck(what)
	return nil
}

// Advance moves the node's clock to t: kubelet's retries and ipamd's
// loops that fall due meanwhile run.
//
// A fleet advances every node on every event; a node with nothing due
// before t only has its clock set, as advance itself would do after
// finding nothing due, without walking its pods.
func (n *Node) Advance(t time.Duration) {
	if t <= n.r.now {
		return
	}
	if !n.dueKnown {
		n.due, n.dueKnown = n.r.dueAt(), true
	}
	if n.due >= 0 && n.due <= t {
		n.r.advance(t)
		n.changed()
		return
	}
	n.r.setNow(t)
}

// Finish lets the node settle as a scenario's end does: kubelet's retries,
// then ipamd's reconciler passes.
func (n *Node) Finish() {
	n.r.finish()
	n.changed()
}

// Running lists the pods that hold their address, by name. The slice is
// the node's until its next change: callers read it, never write it.
func (n *Node) Running() []PodInfo {
	n.readPods()
	return n.pods.running
}

// Pods is how many pods the node has that are not gone: running, being
// deleted, or waiting for kubelet to run them again.
func (n *Node) Pods() int {
	n.readPods()
	return n.pods.count
}

func (n *Node) readPods() {
	if n.pods.known && n.pods.ver == n.r.podsVer {
		return
	}
	var live []PodInfo
	count := 0
	for name, p := range n.r.pods {
		if p.phase == running {
			live = append(live, n.info(name, p))
		}
		if p.phase == running || p.phase == terminating || p.wantRun {
			count++
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	n.pods = podsView{known: true, ver: n.r.podsVer, running: live, count: count}
}

// Calls counts the plugin's invocations by CNI command.
func (n *Node) Calls() map[string]int { return n.r.exec.calls }

// Check runs the node's invariants on its current state, remote being the
// addresses pods on other nodes hold: the objects of deleted pods, ipamd's
// allocations against the live pods, routing to and from the live pods
// (to every remote address by the kernel's own lookups). Mid-run, a pod
// being deleted or an ipamd evicted is a state on its way somewhere:
// the caller judges what persists.
func (n *Node) Check(remote map[netip.Addr]string) ([]invariant.Violation, error) {
	if err := n.r.clockErr; err != nil {
		return nil, fmt.Errorf("node %s: %w", n.name, err)
	}
	n.r.remote = remote
	defer func() { n.r.remote = map[netip.Addr]string{} }()
	vs, err := invariant.Check(n.r.world())
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.name, err)
	}
	return vs, nil
}

// Generation counts the changes made to the node's kernel (every
// namespace of it): equal readings mean its routing is as it was.
func (n *Node) Generation() uint64 { return n.r.kern.Generation() }

// CheckRouting checks the routing of the named running pods by the node
// kernel's own lookups (invariant.CheckRouting): traffic to each goes to
// its veth, and from each to every address of remote leaves by its own
// ENI. Names of pods not running are ignored.
func (n *Node) CheckRouting(pods []string, remote map[netip.Addr]string) []invariant.Violation {
	w := invariant.World{Node: n.r.node, Remote: remote, ENILink: eniLink}
	for _, name := range pods {
		if p, ok := n.r.pods[name]; ok && p.phase == running {
			w.Live = append(w.Live, n.r.invPod(name, p))
		}
	}
	return invariant.CheckRouting(w)
}

// StepFindings are what the invariants that run after every step (an
// address held twice, released with its objects still there) found since
// the last call.
func (n *Node) StepFindings() []invariant.Violation {
	vs := n.r.steps1.found
	n.r.steps1.found = nil
	return vs
}

// Snapshot is the node's kernel, one object per line, for a report.
func (n *Node) Snapshot() []string { return snapshotLines(n.r.node) }

// ArmCrash has the node's ipamd (or plugin) die at point on its next hit.
func (n *Node) ArmCrash(point failpoint.Name) error {
	return n.r.fp.Arm(point, failpoint.Crash, 1)
}

// Close stops ipamd and removes the node's scratch directory; the
// fleet terminates its instance.
func (n *Node) Close() { n.r.close() }
