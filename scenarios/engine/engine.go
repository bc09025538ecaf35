// Package engine runs a scenario: one node on the kernel model, ipamd
// in-process on a real Unix socket, the plugin driven through libcni as
// containerd drives it, and the actors of the timeline — the runtime, a
// kubelet that retries failed DELs with back-off on a simulated clock, and
// the autoscaler that evicts aws-node and cancels the eviction.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/ipamd/warmpool"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// OffVPC are the addresses (documentation ranges) the routing check sends
// pods' traffic to.
var OffVPC = []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")}

// Step is one timeline entry as it ran.
type Step struct {
	At      time.Duration `json:"at"`
	Event   string        `json:"event"`
	Notes   []string      `json:"notes,omitempty"`
	Added   []string      `json:"added,omitempty"`
	Removed []string      `json:"removed,omitempty"`
}

// Result is one scenario run in one mode under one policy.
type Result struct {
	Scenario string `json:"scenario"`
	Incident string `json:"incident,omitempty"`
	// KnownLimit is the scenario's: why the default flow cannot be clean.
	KnownLimit string `json:"knownLimit,omitempty"`
	File       string `json:"file,omitempty"`
	Mode       string `json:"mode"`
	Policy     string `json:"policy"`
	Expected   string `json:"expected"`
	Verdict    string `json:"verdict"` // clean, or leak for any violation
	// Main is the most serious kind found ("" when clean): LEAK,
	// DOUBLE-ASSIGN, STUCK, MISROUTE, BROKEN, IPAM in that order.
	Main       string                `json:"main,omitempty"`
	Kinds      []string              `json:"kinds,omitempty"`
	Violations []invariant.Violation `json:"violations,omitempty"`
	// Audit are the node audit's findings on the final state (package
	// audit, from what an operator's tool reads); they must agree with
	// the violations (AUDIT-DISAGREES otherwise).
	Audit []audit.Finding `json:"audit,omitempty"`
	Match bool            `json:"match"`
	Steps []Step          `json:"steps"`
	// Marks are the run's ADDs, DEL attempts and ipamd's ups and downs
	// (none in quiet runs), for pictures of the timeline.
	Marks []Mark `json:"marks,omitempty"`
	// Hits counts how often each failpoint was reached (the explorer
	// enumerates occurrences from it).
	Hits map[string]int `json:"hits,omitempty"`
}

type phase int

const (
	pending phase = iota
	running
	terminating
	deleted
)

type pod struct {
	spec        spec.Pod
	ns, name    string
	containerID string
	netns       string
	phase       phase
	ip          netip.Addr
	device      int
	hostVeth    string
	attempts    int
	nextRetry   time.Duration
	incarnation int
	vlan        int  // the sandbox's branch ENI VLAN (branch modes)
	noRetry     bool // force-deleted: kubelet does not retry its DEL
	wantRun     bool // its ADD failed: kubelet tries the sandbox again
	quiet       bool // a retry round reports itself in one line
	forgotten   bool // the runtime lost its sandbox (runtime-forgets)
	unpinned    bool // ipamd picks its ENI (a fleet's pods)
}

type run struct {
	s     *spec.Scenario
	mode  string
	pol   policy.Policy
	opt   Options
	now   time.Duration
	kern  *model.Kernel
	node  kernel.API
	cloud *memory.Cloud
	ipamd *ipamd.Daemon
	sock  string
	tmp   string
	exec  *inprocExec
	cni   *libcni.CNIConfig
	list  *libcni.NetworkConfigList
	pods  map[string]*pod
	// podsVer counts the changes to pods' phases and to which pods exist
	// (movedPods): a fleet's node reads its pods again only when it moved.
	podsVer uint64
	remote  map[netip.Addr]string
	podENI  *podeni.Static // branch modes only
	ckpt    string         // ipamd's checkpoint file
	ticked  time.Duration  // when ipamd's loops last ran
	// idleThrough is the end of the last advance: the ticks up to it
	// that did not run were idle (nextTickAt).
	idleThrough time.Duration
	fp          *failpoint.Set // the run's failpoints, shared by plugin, ipamd and its cloud
	// sweepRand draws the delays of ipamd's leaked-ENI sweeps, seeded by
	// the instance, so that a fleet's nodes sweep apart and runs repeat.
	sweepRand *rand.Rand
	// restartAt is when kubelet restarts an ipamd that crashed at a
	// failpoint (-1: none pending), with restartMemory of its checkpoint.
	restartAt     time.Duration
	restartMemory string
	gone          []invariant.Pod // every removed sandbox, in order
	vlanSeq       int
	steps         []Step
	cur           *Step
	marks         []Mark
	log           *slog.Logger
	// foreign are another agent's rules, planted before the first event.
	foreign []kernel.Rule
	// nat are the node's iptables; natWant what they must hold once an
	// ipamd has started (natStarted).
	nat        *hostnat.MemTables
	natWant    hostnat.Plan
	natStarted bool
	// gcList is the network at CNI 1.1.0, for GC.
	gcList *libcni.NetworkConfigList
	// pausing is set while an ADD waits (addTakes): ipamd's loops run,
	// kubelet's ADD retries do not.
	pausing bool
	// steps1 is what the step invariants saw and found.
	steps1 stepWatch
	// badConfig makes the next ipamd start with a setting out of range.
	badConfig bool
	// lost are sandboxes the runtime lost and no GC has collected yet.
	lost []invariant.Pod
	// onHold, when set, hears a pod start (held) or stop holding its
	// address: a fleet indexes every address of the cluster with it.
	onHold func(name string, p *pod, held bool)
	// latest is the latest time the clock has shown, clockErr its first
	// fault (clock.go): the clock never goes back.
	latest   time.Duration
	clockErr error
}

// Options tune a run.
type Options struct {
	// Log receives ipamd's and the plugin's logs (nil: discarded).
	Log *slog.Logger
	// SkipSteps are driver steps left out of every setup and teardown
	// (driver.SkipSteps, on the run's failpoints): tests remove a step and
	// watch the invariants catch it.
	SkipSteps []string
	// Quiet skips the kernel snapshots of the timeline (the explorer runs
	// thousands of schedules and reads only the verdict).
	Quiet bool
	// Tolerant notes and skips an event the state does not allow (a
	// delete of a pod that does not run) instead of failing the run: a
	// generated timeline cannot foresee every fault's effect.
	Tolerant bool
	// EveryTick runs ipamd's loops on every tick of the clock, the ones
	// that provably do nothing included (nextTickAt): tests run both ways
	// and compare, to show that skipping them changes nothing.
	EveryTick bool
	// Ipamd, when set, replaces the policy's daemon switches: mutation
	// tests judge the plugin's teardown alone, without the reconciler
	// cleaning up after it.
	Ipamd *policy.Ipamd
	// auditInput, when set, changes what the audit reads before it runs:
	// tests make it disagree with the invariants.
	auditInput func(*audit.Input)
	// atEvent, when set, runs before each event of the timeline: tests
	// put the run in a state no event should (the clock moved back) and
	// watch Run fail.
	atEvent func(r *run, i int)
	// launch, when set, starts the node's instance (a fleet's nodes share
	// one VPC); nil: an instance of its own (memory.NewWithOptions).
	launch func(instanceType string, opt memory.Options) (*memory.Cloud, error)
}

// Run executes s in mode under pol and checks the invariants.
func Run(s *spec.Scenario, mode string, pol policy.Policy, opt Options) (*Result, error) {
	expected, ok := s.Expected(pol.Name(), mode)
	if !ok {
		return nil, fmt.Errorf("%s: no expectation for policy %s in mode %s", s.Name, pol.Name(), mode)
	}
	r, err := newRun(s, mode, pol, opt)
	if err != nil {
		return nil, err
	}
	defer r.close()
	for i, ev := range s.Timeline {
		if len(ev.Modes) > 0 && !slices.Contains(ev.Modes, mode) {
			continue
		}
		if opt.atEvent != nil {
			opt.atEvent(r, i)
		}
		if err := r.event(ev); err != nil {
			var na inapplicable
			if !opt.Tolerant || !errors.As(err, &na) {
				return nil, fmt.Errorf("%s: timeline[%d]: %w", s.Name, i, err)
			}
			r.note("not applicable now, skipped: %v", err)
		}
		r.watchIpamd()
		r.stepCheck(fmt.Sprintf("timeline[%d]", i))
		if r.clockErr != nil {
			return nil, fmt.Errorf("%s: timeline[%d]: %w", s.Name, i, r.clockErr)
		}
	}
	r.begin("end: kubelet and ipamd settle (reconciler passes), then check invariants")
	r.finish()
	if r.clockErr != nil {
		return nil, fmt.Errorf("%s: end: %w", s.Name, r.clockErr)
	}
	w := r.world()
	vs, err := invariant.Check(w)
	if err != nil {
		return nil, err
	}
	vs = append(vs, r.steps1.found...)
	vs = append(vs, r.lostFindings()...)
	// The node audit judges the same state independently (auditcheck.go).
	findings, disagree, err := r.auditCheck(w, vs)
	if err != nil {
		return nil, err
	}
	vs = append(vs, disagree...)
	r.end()
	res := &Result{Scenario: s.Name, Incident: s.Incident, KnownLimit: s.KnownLimit, File: s.File, Mode: mode, Policy: pol.Name(), Expected: expected,
		Violations: vs, Kinds: invariant.Kinds(vs), Audit: findings, Steps: r.steps, Marks: r.marks, Verdict: "clean", Hits: map[string]int{}}
	for n, c := range r.fp.Hits() {
		res.Hits[string(n)] = c
	}
	if len(vs) > 0 {
		res.Verdict = "leak"
	}
	res.Main = invariant.Main(vs)
	// A clean expectation tolerates nothing; any other names the kind the
	// invariants must catch ("leak": LEAK among them).
	res.Match = (expected == "clean") == (len(vs) == 0) && (expected == "clean" || hasKind(vs, strings.ToUpper(expected)))
	// The audit disagreeing with the invariants is the harness's failure,
	// whatever the node's verdict: no other expectation tolerates it.
	if hasKind(vs, invariant.AuditDisagrees) && expected != strings.ToLower(invariant.AuditDisagrees) {
		res.Match = false
	}
	return res, nil
}

func hasKind(vs []invariant.Violation, k string) bool {
	for _, v := range vs {
		if v.Kind == k {
			return true
		}
	}
	return false
}

func newRun(s *spec.Scenario, mode string, pol policy.Policy, opt Options) (*run, error) {
	return newRunAt(s, mode, pol, opt, 0)
}

// newRunAt starts the node at time at of the simulated clock (a fleet's
// nodes join later than its first).
func newRunAt(s *spec.Scenario, mode string, pol policy.Policy, opt Options, at time.Duration) (*run, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmp, err := os.MkdirTemp(scratchDir(), "vpccni-scenario-")
	if err != nil {
		return nil, err
	}
	r := &run{s: s, mode: mode, pol: pol, opt: opt, kern: model.New(), tmp: tmp, sock: filepath.Join(tmp, "aws-node", "ipamd.sock"),
		ckpt: filepath.Join(tmp, "aws-node", "ipam.json"), pods: map[string]*pod{}, remote: map[netip.Addr]string{}, log: log,
		fp: &failpoint.Set{}, restartAt: -1, now: at, latest: at}
	if isBranch(mode) {
		r.podENI = podeni.NewStatic()
	}
	// An attached ENI's link appears in the node namespace, as the
	// hypervisor makes it; ipamd configures it.
	copt := memory.Options{Trunk: isBranch(mode), Bare: s.Node.Start == "fresh",
		OnAttach: func(e cloud.ENI) { r.plugENI(e) }, OnDetach: func(e cloud.ENI) { r.unplugENI(e) },
		// (ipamd's calls to EC2 can die at the run's failpoints, and the
		// ENIs they create are stamped with the run's clock)
		Provider: cloud.ProviderOptions{Failpoints: r.fp, Now: r.clock}}
	launch := memory.NewWithOptions
	if opt.launch != nil {
		launch = opt.launch
	}
	if r.cloud, err = launch(s.Node.InstanceType, copt); err != nil {
		r.close()
		return nil, err
	}
	r.begin("node: " + s.Node.InstanceType + " (" + s.Node.Start + "), ipamd starts")
	var inst cloud.Instance
	if r.node, inst, err = buildNode(r.kern, r.cloud, mode == "ipv6"); err != nil {
		r.close()
		return nil, err
	}
	r.nat, r.natWant = hostnat.NewMemTables(), natPlan(inst)
	if err := r.plantForeignNAT(); err != nil {
		r.close()
		return nil, err
	}
	if err := r.plantForeignRules(); err != nil {
		r.close()
		return nil, err
	}
	if err := r.startIpamd("kept"); err != nil {
		r.close()
		return nil, err
	}
	r.steps1.daemon = r.ipamd
	if r.ipamd == nil {
		r.close()
		return nil, fmt.Errorf("ipamd did not start on a new node: %s", strings.Join(r.cur.Notes, "; "))
	}
	r.end()
	for _, p := range s.Pods {
		ns, name, _ := strings.Cut(p.Name, "/")
		r.pods[p.Name] = &pod{spec: p, ns: ns, name: name, device: p.Device}
		r.movedPods()
	}
	if err := driver.SkipSteps(r.fp, opt.SkipSteps...); err != nil {
		r.close()
		return nil, err
	}
	drv := driver.New(log).WithFailpoints(r.fp)
	r.exec = &inprocExec{policy: pol, calls: map[string]int{}}
	env := plugin.Env{
		Kernel:     r.kern.Opener(nodeNS),
		Log:        log,
		Version:    "scenario",
		Driver:     drv,
		IsHostNS:   func(path string) (bool, error) { return path == nodeNS, nil },
		Failpoints: r.fp,
		DeleteFlow: r.exec.deleteFlow,
		// Only vpccni's flow queues; only vpccni's ipamd drains
		// (policy.Ipamd.DrainReleaseQueue).
		ReleaseQueue: plugin.QueueBesideSocket,
	}
	// The plugin dials ipamd as its binary does (plugin.DialGRPC and the
	// default inventory dialer: internal/unarygrpc, a connection per
	// invocation), so what the explorer finds of the client is what a
	// node would see.
	env.Dial = r.slowAdds(plugin.DialGRPC)
	if !opt.Quiet {
		// The timeline says what each DEL did: ipamd's answer and the
		// teardowns, seen at the plugin's seams.
		r.exec.tr = &tracing{}
		env.Dial = r.exec.tr.dialer(env.Dial)
		env.Driver = tracedDriver{drv, r.exec.tr}
	}
	r.exec.plugin = plugin.New(env)
	r.cni = libcni.NewCNIConfigWithCacheDir([]string{"/opt/cni/bin"}, filepath.Join(tmp, "cni-cache"), r.exec)
	// The plugin's node-local state (its attachment records) lives in the
	// run's scratch directory, never in the machine's /var/lib/cni.
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[{"type":"vpc-cni","ipamdAddress":"unix://%s","ipamdTimeout":"2s","podSGEnforcingMode":%q,"stateDir":%q}]}`,
		r.sock, enforcingMode(mode), filepath.Join(tmp, "vpc-cni"))
	if r.list, err = libcni.NetworkConfFromBytes([]byte(conf)); err != nil {
		r.close()
		return nil, err
	}
	// GC is CNI 1.1: the same network at that version (ADD and DEL stay at
	// 1.0.0, the newest containerd 1.6 speaks).
	if r.gcList, err = libcni.NetworkConfFromBytes([]byte(strings.Replace(conf, `"1.0.0"`, `"1.1.0"`, 1))); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *run) close() {
	if r.ipamd != nil {
		r.ipamd.Stop()
	}
	os.RemoveAll(r.tmp)
}

// scratchDir is where a run keeps its socket, checkpoint and CNI cache:
// memory (/dev/shm) where there is some, so the checkpoint's fsyncs cost
// nothing; a simulated crash keeps the page cache anyway.
func scratchDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// epoch is the simulated clock's zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is the simulated time, for ipamd.
func (r *run) clock() time.Time { return epoch.Add(r.now) }

// startIpamd starts a new ipamd process on the node's socket, with its
// checkpoint as memory says ("kept", "lost", "corrupt") and the daemon of
// the policy's era. An ipamd that refuses to start (a corrupt checkpoint
// without recovery) stays down, as a crash-looping aws-node does: that is
// noted, not an error of the run.
func (r *run) startIpamd(memory string) error {
	switch memory {
	case "lost":
		if err := os.Remove(r.ckpt); err != nil && !os.IsNotExist(err) {
			return err
		}
	case "corrupt":
		if err := os.WriteFile(r.ckpt, []byte(`{"version":"vpc-cni-ipam/1","allocations":[{"networkName":"aws-`), 0o600); err != nil {
			return err
		}
	}
	grace, interval := r.ipamdTiming()
	prof := r.pol.Ipamd()
	if r.opt.Ipamd != nil {
		prof = *r.opt.Ipamd
	}
	if set := r.s.Node.Ipamd; set != nil && set.Reconcile != nil && !*set.Reconcile {
		prof.Reconcile = false
	}
	cfg := ipamd.Config{SocketPath: r.sock, Inventory: r.cloud, Logger: r.log, Version: "scenario", IPv6: r.mode == "ipv6",
		Kernel: r.node, HostNAT: r.hostNAT(), Checkpoint: r.ckpt, ReleaseQueue: r.releaseQueue(prof), Cooldown: datastore.DefaultCooldown, Now: r.clock,
		ReconcileGrace: grace, ReconcileInterval: interval,
		Reconcile: prof.Reconcile, Restore: ipamd.RestorePolicy{AdoptOnMissing: prof.AdoptOnMissing,
			RecoverCorrupt: prof.RecoverCorrupt, PruneStale: prof.PruneStale}}
	if wp := r.s.Node.WarmPool; wp != nil {
		cfg.Cloud = r.cloud.Provider()
		cfg.LeakSweep = r.leakSweep(prof.LeakSweep)
		cfg.Targets = warmpool.Targets{WarmENI: wp.WarmENITarget, WarmIP: wp.WarmIPTarget, MinimumIP: wp.MinimumIPTarget,
			WarmPrefix: wp.WarmPrefixTarget, PrefixDelegation: wp.PrefixDelegation, MaxENI: wp.MaxENI}
	}
	if r.podENI != nil {
		cfg.PodENI, cfg.TrunkLinkIndex = r.podENI, r.trunkIndex
	}
	if r.badConfig {
		r.badConfig = false
		cfg.ReconcileInterval = -time.Second // refused: out of its range
	}
	place := func(ns, name string) (int, bool) {
		p, ok := r.pods[ns+"/"+name]
		if !ok || p.unpinned {
			return 0, false
		}
		return p.device, true
	}
	d, err := ipamd.New(cfg, ipamd.WithPlacement(place), ipamd.WithFailpoints(r.fp), ipamd.WithManualLoops())
	if err == nil {
		err = d.Start()
	}
	if f, ok := failpoint.As(err); ok {
		// Killed while it started: kubelet restarts it after its back-off.
		r.restartAt = r.now + crashBackoff
		r.note("ipamd dies while it starts (%s); kubelet restarts it in %s, checkpoint %s", f, crashBackoff, r.restartMemory)
		return nil
	}
	if err != nil {
		r.note("ipamd does not start (aws-node crash-loops): %v", err)
		return nil
	}
	r.ipamd = d
	r.natStarted = r.natStarted || r.mode != "ipv6"
	r.ticked = r.now
	r.restartAt = -1
	r.note("ipamd started, checkpoint %s: %d allocations", memory, len(d.Allocations()))
	r.mark(Mark{Kind: MarkIpamd, Ipamd: "up", Memory: memory, Text: fmt.Sprintf("%d allocations", len(d.Allocations()))})
	return nil
}

// releaseQueue is the directory the plugin's DELs queue releases in
// (beside the socket), when the policy's ipamd drains it.
func (r *run) releaseQueue(prof policy.Ipamd) string {
	if !prof.DrainReleaseQueue {
		return ""
	}
	q, _ := plugin.QueueBesideSocket("unix://" + r.sock)
	return q.Dir
}

// begin opens a timeline step and snapshots the node to diff against.
func (r *run) begin(event string) {
	r.steps = append(r.steps, Step{At: r.now, Event: event})
	r.cur = &r.steps[len(r.steps)-1]
	if r.node != nil && !r.opt.Quiet {
		r.cur.Added = snapshotLines(r.node) // holds "before" until end()
	}
}

func (r *run) end() {
	before := r.cur.Added
	r.cur.Added, r.cur.Removed = nil, nil
	if r.node == nil || r.opt.Quiet {
		return
	}
	after := snapshotLines(r.node)
	r.cur.Added, r.cur.Removed = diffLines(before, after)
}

func (r *run) note(format string, a ...any) {
	if r.opt.Quiet {
		return // nobody reads the timeline
	}
	r.cur.Notes = append(r.cur.Notes, fmt.Sprintf(format, a...))
}

func snapshotLines(h kernel.API) []string {
	st, err := kernel.Snapshot(h)
	if err != nil {
		return []string{"snapshot failed: " + err.Error()}
	}
	return st.Lines()
}

func diffLines(before, after []string) (added, removed []string) {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	b, a := in(before), in(after)
	for _, x := range after {
		if !b[x] {
			added = append(added, x)
		}
	}
	for _, x := range before {
		if !a[x] {
			removed = append(removed, x)
		}
	}
	return added, removed
}

var bg = context.Background
