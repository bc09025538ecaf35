package fleet

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// A VPC of two blocks: each node launches into one of them (they
// alternate, equal in size) and holds addresses of its own block only;
// vpccni's flow is clean, and the narrowed routing check (a stand-in per
// block) agrees with the full one on every node after every event, under
// vpccni's flow and under the leaking ref-v1.11 one.
const twoBlocks = `
name: two-blocks
seed: 2
duration: 30m
vpc: {cidrs: [10.0.0.0/25, 100.64.0.0/25]}
nodeGroups:
  - name: ng
    nodes: 4
    maxPods: 16
    node: {instanceType: m5.large, warmPool: {warmIPTarget: 2, minimumIPTarget: 4}}
pods: {perNode: 12, createPerHour: 240, deletePerHour: 240}
drains: {perHour: 24, evictAwsNodeFirst: true, cancelPercent: 50, takes: 2m, memory: lost}
expect: {default: [clean], ref-v1.11: [misroute, leak]}
`

func TestFleetInTwoBlocks(t *testing.T) {
	f, err := spec.ParseFleet([]byte(twoBlocks))
	if err != nil {
		t.Fatal(err)
	}
	blocks := f.VPCBlocks()
	blockOf := func(a netip.Addr) int {
		return slices.IndexFunc(blocks, func(b netip.Prefix) bool { return b.Contains(a) })
	}
	for _, pol := range []string{"default", "ref-v1.11"} {
		held := map[int]int{}         // addresses held by pods, by block, summed over events
		nodeBlock := map[string]int{} // the block of each node's pods
		compared, misrouted := 0, 0
		brk := func(w *World) {
			for a, h := range w.index {
				b := blockOf(a)
				held[b]++
				if prev, ok := nodeBlock[h.node]; ok && prev != b {
					t.Errorf("t=%s node %s holds %s (block %d) and an address of block %d", w.now, h.node, a, b, prev)
				}
				nodeBlock[h.node] = b
			}
			c, m := compareNarrowed(t, w)
			compared, misrouted = compared+c, misrouted+m
		}
		res := run(t, f, pol, Options{Break: brk})
		if held[-1] != 0 || held[0] == 0 || held[1] == 0 {
			t.Fatalf("%s: pod addresses by block %v: want both blocks, nothing outside them", pol, held)
		}
		if res.Drains == 0 || res.Nodes <= 4 {
			t.Errorf("%s: %d drains, %d nodes: no node was replaced", pol, res.Drains, res.Nodes)
		}
		t.Logf("%s: pod addresses by block %v; %d node comparisons, %d senders misrouting; nodes' blocks %v", pol, held, compared, misrouted, nodeBlock)
		if !res.Match {
			t.Fatalf("%s in two blocks: want %v, got %v (first: %+v)", pol, res.Expected, res.ByKind, res.First)
		}
		if pol == "ref-v1.11" && misrouted == 0 {
			t.Fatalf("ref-v1.11 in two blocks: no sender misrouting in %d comparisons: the comparison shows nothing", compared)
		}
		inBlock := map[string]int{}
		for _, fd := range res.Findings {
			for _, b := range []string{"10.0.0.", "100.64.0."} {
				if fd.Kind == "MISROUTE" && strings.Contains(fd.What, b) {
					inBlock[b]++
				}
			}
		}
		t.Logf("%s: misroutes naming each block %v", pol, inBlock)
		// The leaked rules name secondary-block addresses: a view of the
		// primary block alone would not read them.
		if pol == "ref-v1.11" && inBlock["100.64.0."] == 0 {
			t.Errorf("ref-v1.11: no misroute in the secondary block")
		}
	}
}

// compareNarrowed checks, on every node, that the narrowed destinations
// (named addresses held elsewhere, a stand-in per class) find a misroute
// for exactly the senders every address held elsewhere finds one for.
// It returns the nodes compared and the senders found misrouting.
func compareNarrowed(t *testing.T, w *World) (compared, misrouted int) {
	t.Helper()
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
	return compared, misrouted
}

// A rule sending the secondary block (and only it) out of the main table
// on one node misroutes traffic from pods of its other ENIs: the
// secondary block's stand-in finds it though no address it names is held.
func TestRuleOverOneBlockMisroutes(t *testing.T) {
	f, err := spec.ParseFleet([]byte(twoBlocks))
	if err != nil {
		t.Fatal(err)
	}
	done := false
	brk := func(w *World) {
		if done || w.now == 0 {
			return
		}
		done = true
		_, second, _ := net.ParseCIDR("100.64.0.0/25")
		if err := w.nodes[0].Kernel().RuleAdd(kernel.Rule{Priority: 100, Dst: second, Table: kernel.TableMain, Family: kernel.FamilyV4}); err != nil {
			t.Error(err)
		}
	}
	res := run(t, f, "default", Options{Break: brk})
	if res.ByKind["MISROUTE"] == 0 {
		t.Fatalf("want MISROUTE, got %v", res.Findings)
	}
	for _, fd := range res.Findings {
		if fd.Kind == "MISROUTE" && !strings.Contains(fd.What, "100.64.0.") {
			t.Errorf("a misroute outside the secondary block: %+v", fd)
		}
	}
}

// A rule or route narrower than a block tells that block's addresses
// apart; one covering whole blocks (or none) does not. Each block has a
// stand-in of its own, outside the narrower prefixes and the addresses
// named singly.
func TestStandInsPerBlock(t *testing.T) {
	blocks := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.1.0.0/24")}
	for p, want := range map[string]bool{
		"10.0.0.0/8": false, "10.1.0.0/24": false, "10.2.0.0/24": false, "0.0.0.0/0": false,
		"10.1.0.128/25": true, "10.0.0.5/32": true,
	} {
		if got := insideBlock(netip.MustParsePrefix(p), blocks); got != want {
			t.Errorf("insideBlock(%s) = %v", p, got)
		}
	}
	hosts := map[netip.Addr]bool{netip.MustParseAddr("10.0.0.254"): true}
	got := standIns(blocks, []netip.Prefix{netip.MustParsePrefix("10.1.0.128/25")}, hosts)
	want := []netip.Addr{
		netip.MustParseAddr("10.0.0.253"), // block 0: .254 is named singly
		netip.MustParseAddr("10.1.0.127"), // block 1 outside the /25
		netip.MustParseAddr("10.1.0.254"), // the /25
	}
	if !slices.Equal(got, want) {
		t.Errorf("stand-ins %v, want %v", got, want)
	}
}
