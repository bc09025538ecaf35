package explore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Generate makes the i-th timeline of a seed: a node (its ENIs as the
// memory cloud makes them, sometimes another agent's rules, sometimes
// ipamd's reconciler off or at its shortest grace), a few pods, and a
// timeline of the moves that, combined, broke vpccni before: pods deleted
// and recreated under the same name, containerd's second DEL arriving late,
// DELs with forged prevResults, a runtime that loses sandboxes and GCs,
// ipamd evicted, killed, hung or restarted with its checkpoint kept, lost
// or corrupt (or a bad setting), failpoints, waits past the cooldown,
// addresses taken by pods of other nodes. The same seed, index and mode
// always give the same file.
func Generate(seed uint64, i int, mode string) *spec.Scenario {
	g := &gen{r: rand.New(rand.NewPCG(seed, uint64(i))), mode: mode}
	return g.scenario(fmt.Sprintf("random-%d-%d-%s", seed, i, mode))
}

// move weights: how often each kind of event is drawn, when the state
// allows it. Recreation is an add of a deleted pod; what makes a schedule
// interesting is a combination, so no move dominates.
var moves = []struct {
	name   string
	weight int
}{
	{"add", 24}, {"delete", 16}, {"force-delete", 3}, {"late-del", 9}, {"forget", 3}, {"gc", 3},
	{"evict", 4}, {"cancel-eviction", 8}, {"restart", 6}, {"failpoint", 6}, {"wait", 10},
	{"reuse", 3}, {"settle", 2},
}

type gen struct {
	r    *rand.Rand
	mode string
	pods []*gpod
	// ipamdDown: evicted by this timeline (a crash the generator cannot
	// foresee is the engine's to handle: it skips what does not apply).
	ipamdDown bool
	others    int
	// lostSandboxes: the runtime lost a sandbox no GC has collected yet;
	// amnesia: ipamd may have restarted without its checkpoint.
	lostSandboxes, amnesia bool
	// kills counts crash and hang failpoints: one per schedule (see move);
	// failpoints counts them all.
	kills, failpoints int
}

// memory is what a restarted ipamd finds of its checkpoint. While the
// runtime has lost a sandbox that no GC has collected, it keeps it: the
// two losses together leave an allocation that names no sandbox (rebuilt
// from the kernel) for a sandbox nobody lists, which neither GC nor the
// reconciler can tell is gone (a known limit while GC collects only what
// ipamd lists, not what only an attachment record names).
func (g *gen) memory() string {
	if g.lostSandboxes {
		return "kept"
	}
	m := spec.KnownMemory[g.pick(len(spec.KnownMemory))]
	g.amnesia = g.amnesia || m != "kept"
	return m
}

// gpod is what the generator believes of a pod.
type gpod struct {
	name    string
	running bool
	adds    int  // sandboxes run so far
	gone    bool // deleted at least once (its address may be free)
}

func (g *gen) branch() bool { return g.mode != "ipv4" && g.mode != "ipv6" }

// branchBlind: in a branch mode, ipamd is evicted and a DEL may have failed
// part-way. Letting time pass beyond kubelet's retries then leaves a
// branch attachment only those retries could have finished (nothing on the
// node sweeps one; GC does not collect from the attachment records: a known
// limit, docs/architecture.md#known-limits).
func (g *gen) branchBlind() bool { return g.branch() && g.ipamdDown && g.failpoints > 0 }

func (g *gen) pick(n int) int { return g.r.IntN(n) }

func (g *gen) chance(pct int) bool { return g.r.IntN(100) < pct }

func (g *gen) scenario(name string) *spec.Scenario {
	s := &spec.Scenario{Name: name, Modes: []string{g.mode}, Node: spec.Node{InstanceType: "m5.large", KubeletRetries: 5, Start: "full"}}
	if g.chance(35) {
		s.Node.ForeignRules = []spec.ForeignRule{
			{Priority: 512, To: "10.99.0.5/32", Table: 254}, {Priority: 1536, From: "10.99.0.5/32", Table: 100},
			{Priority: 512, To: "10.0.2.10/32", Table: 254}, // eth1's own address, in a pod rule's shape
		}
	}
	// vpccni runs with its reconciler, the safety net of every release a
	// DEL could not make: sometimes at its shortest grace.
	if g.chance(25) {
		s.Node.Ipamd = &spec.IpamdSettings{ReconcileGrace: spec.Minimum, ReconcileInterval: spec.Minimum}
	}
	n := 2 + g.pick(3)
	for j := range n {
		p := spec.Pod{Name: fmt.Sprintf("default/p%d", j), Device: g.pick(3)}
		if g.mode == "ipv6" {
			p.Device = 0
		}
		if g.chance(10) {
			// Slower than a DAD wait, but within the contract the shortest
			// reconcile grace (30 s) is set for.
			p.AddTakes = &spec.Duration{Duration: time.Duration(5+g.pick(21)) * time.Second}
		}
		s.Pods = append(s.Pods, p)
		g.pods = append(g.pods, &gpod{name: p.Name})
	}
	events := 6 + g.pick(14)
	for len(s.Timeline) < events {
		if ev, ok := g.move(); ok {
			s.Timeline = append(s.Timeline, ev)
		}
	}
	if g.ipamdDown {
		// aws-node is a DaemonSet: it comes back. A node whose ipamd never
		// returns has nothing to clean up with but the plugin.
		s.Timeline = append(s.Timeline, spec.Event{CancelEviction: "aws-node", Memory: g.memory()})
	}
	s.Expect = map[string]spec.Verdicts{}
	return s
}

// move draws one event the state allows, false when the drawn kind does
// not apply now.
func (g *gen) move() (spec.Event, bool) {
	total := 0
	for _, m := range moves {
		total += m.weight
	}
	x := g.pick(total)
	kind := ""
	for _, m := range moves {
		if x < m.weight {
			kind = m.name
			break
		}
		x -= m.weight
	}
	running := g.filter(func(p *gpod) bool { return p.running })
	switch kind {
	case "add":
		ps := g.filter(func(p *gpod) bool { return !p.running })
		if len(ps) == 0 {
			return spec.Event{}, false
		}
		p := ps[g.pick(len(ps))]
		p.running, p.adds = true, p.adds+1
		return spec.Event{Add: []spec.PodRef{{Name: p.name}}}, true
	case "delete", "force-delete", "forget":
		// Two known limits of branch-ENI pods (docs/architecture.md#known-limits)
		// the explorer does not draw: nothing on the node sweeps a branch
		// attachment after the fact (GC does not collect from the
		// attachment records), so a runtime that loses a branch pod's
		// sandbox, or a force delete (no retries, the pod gone from the
		// API server) whose DEL and the runtime's second DEL both fail,
		// leaves it to the node's next reboot.
		if len(running) == 0 || (kind == "forget" && (g.amnesia || g.branch())) ||
			(kind == "force-delete" && g.branch() && g.failpoints > 0) {
			return spec.Event{}, false
		}
		p := running[g.pick(len(running))]
		p.running, p.gone = false, true
		switch kind {
		case "force-delete":
			return spec.Event{ForceDelete: []string{p.name}, WithoutPrevResult: g.chance(30)}, true
		case "forget":
			g.lostSandboxes = true
			return spec.Event{RuntimeForgets: []string{p.name}}, true
		}
		ev := spec.Event{Delete: []string{p.name}}
		switch x := g.pick(10); {
		case x < 2:
			ev.ForgePrevResult = g.forgery()
		case x < 3:
			ev.WithoutPrevResult = true
		}
		return ev, true
	case "late-del":
		ps := g.filter(func(p *gpod) bool { return p.adds >= 2 || (p.adds == 1 && !p.running) })
		if len(ps) == 0 {
			return spec.Event{}, false
		}
		return spec.Event{LateDel: []string{ps[g.pick(len(ps))].name}}, true
	case "gc":
		// GC asks ipamd what to collect: while it is down, nothing is.
		g.lostSandboxes = g.lostSandboxes && g.ipamdDown
		return spec.Event{GC: &struct{}{}}, true
	case "evict":
		if g.ipamdDown {
			return spec.Event{}, false
		}
		g.ipamdDown = true
		return spec.Event{Evict: "aws-node"}, true
	case "cancel-eviction", "restart":
		if kind == "cancel-eviction" && !g.ipamdDown {
			return spec.Event{}, false
		}
		g.ipamdDown = false
		ev := spec.Event{Memory: g.memory(), BadConfig: g.chance(8)}
		if ev.BadConfig {
			g.ipamdDown = true // it refuses to start
		}
		if kind == "restart" {
			ev.Restart = "ipamd"
		} else {
			ev.CancelEviction = "aws-node"
		}
		return ev, true
	case "failpoint":
		// Errors as many as drawn; one crash or hang: a plugin killed on
		// two DELs of a force-deleted branch pod leaves what only its
		// attachment record names, which nothing collects yet (a known
		// limit), and one kill is what each fault of the incident is.
		points := generatedPoints()
		g.failpoints++
		action := failpoint.Actions[g.pick(len(failpoint.Actions))]
		if action != failpoint.Error {
			if g.kills > 0 {
				action = failpoint.Error
			}
			g.kills++
		}
		return spec.Event{Failpoint: &spec.Failpoint{Name: string(points[g.pick(len(points))].Name),
			Action: string(action), Occurrence: 1 + g.pick(2), Memory: g.memory()}}, true
	case "wait":
		waits := []time.Duration{time.Second, 10 * time.Second, 35 * time.Second, 2 * time.Minute}
		if g.branchBlind() {
			waits = waits[:2] // within kubelet's retries (31 s)
		}
		return spec.Event{Wait: &spec.Duration{Duration: waits[g.pick(len(waits))]}}, true
	case "reuse":
		ps := g.filter(func(p *gpod) bool { return p.gone && !p.running })
		if len(ps) == 0 || g.mode == "ipv6" {
			return spec.Event{}, false
		}
		g.others++
		return spec.Event{Add: []spec.PodRef{{Name: fmt.Sprintf("default/remote-%d", g.others), Node: "other",
			ReuseIPOf: ps[g.pick(len(ps))].name}}}, true
	case "settle":
		if g.branchBlind() {
			return spec.Event{}, false
		}
		return spec.Event{Settle: &struct{}{}}, true
	}
	return spec.Event{}, false
}

// withinLimits reports whether a timeline keeps to what Generate draws
// where removing events could break it (shrinking removes events): ipamd
// is running at the end (after an eviction, or a start refused for a bad
// setting, comes a start that succeeds: a node whose ipamd never returns
// is another question, see the library's never-answers scenario), and no
// sandbox the runtime lost is still uncollected (by a GC while ipamd
// runs) when ipamd loses its checkpoint, nor lost after it did (the known
// limit in memory above).
func withinLimits(s *spec.Scenario) bool {
	down, lost, amnesia := false, false, false
	forgets := func(m string) bool { return m != "" && m != "kept" }
	for _, ev := range s.Timeline {
		var m string
		switch {
		case ev.Evict != "":
			down = true
		case ev.CancelEviction != "" || ev.Restart != "":
			down, m = ev.BadConfig, ev.Memory
		case ev.Failpoint != nil:
			m = ev.Failpoint.Memory
		case len(ev.RuntimeForgets) > 0:
			if amnesia {
				return false
			}
			lost = true
		case ev.GC != nil:
			lost = lost && down
		}
		if forgets(m) {
			if lost {
				return false
			}
			amnesia = true
		}
	}
	return !down
}

func (g *gen) filter(keep func(*gpod) bool) []*gpod {
	var out []*gpod
	for _, p := range g.pods {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// forgery draws a hostile prevResult: a wrong but valid table, the legacy
// encoding of main, another agent's address, the node's own addresses, a
// neighbour's, or a free one of the pool.
func (g *gen) forgery() *spec.Forgery {
	tables := []int{0, 1, 2, 3, 4, 100, 105, 254}
	addrs := []string{"10.99.0.5/32", "10.0.1.10/32", "10.0.2.10/32", "10.0.2.200/32", "10.0.1.11/32", "10.0.2.11/32",
		"2600:1f14:a:1::2/128"}
	f := &spec.Forgery{Table: tables[g.pick(len(tables))]}
	if f.Table == 0 || g.chance(50) {
		f.IPs = []string{addrs[g.pick(len(addrs))]}
	}
	return f
}

// generatedPoints are the failpoints a generated timeline may arm: all
// but the cloud's, which fire only where ipamd attaches ENIs (a warm
// pool, which generated nodes have not) and which were registered after
// the fixed budget's seed was chosen: left out, that seed draws the
// timelines it was measured with.
func generatedPoints() []failpoint.Point {
	var out []failpoint.Point
	for _, p := range failpoint.All() {
		if !strings.HasPrefix(string(p.Name), "cloud/") {
			out = append(out, p)
		}
	}
	return out
}
