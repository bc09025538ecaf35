package audit

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// TestHealthyNodeIsClean: live, allocated pods on every ENI and other
// agents' rules at the pod priorities give no finding, whether the audit
// reads the node alone, asks the runtime, or asks ipamd too.
func TestHealthyNodeIsClean(t *testing.T) {
	for _, ask := range []string{"node", "runtime", "runtime+ipamd"} {
		t.Run(ask, func(t *testing.T) {
			w := newWorld(t)
			if ask != "node" {
				w.sandboxes = []Sandbox{}
			}
			if ask == "runtime+ipamd" {
				w.ipamd = &IpamdView{Held: map[netip.Addr]Holder{}}
			}
			w.live("web-0", "10.0.1.11", kernel.TableMain)
			w.live("web-5", "10.0.2.11", 2)
			w.live("web-6", "10.0.2.12", 3)
			w.foreign()
			w.expect()
		})
	}
}

// TestEachClassFromTheNodeAlone: with only the kernel and the checkpoint,
// one finding of each class, exactly, beside healthy pods and foreign
// rules.
func TestEachClassFromTheNodeAlone(t *testing.T) {
	w := newWorld(t)
	w.live("web-0", "10.0.1.11", kernel.TableMain)
	w.live("web-6", "10.0.2.12", 2)
	w.foreign()
	// #2048: web-1's DEL never tore it down, its veth went with its
	// namespace, ipamd forgot it; its address is on another node now.
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	// A checkpoint entry whose pod is gone.
	w.allocate("web-2", "10.0.1.12")
	// web-3's veth is routed an address the checkpoint gives web-9.
	w.pod("web-3", "10.0.1.13", kernel.TableMain, false)
	w.allocate("web-9", "10.0.1.13")
	// web-4 is live and allocated, its rule 512 lost (#3309).
	w.pod("web-4", "10.0.1.14", kernel.TableMain, true)
	w.allocate("web-4", "10.0.1.14")
	// web-7's veth is routed an address nobody holds.
	w.pod("web-7", "10.0.1.17", kernel.TableMain, false)
	w.expect(
		"STRAY ALLOCATION allocation c-web-2 (default/web-2)",
		"DOUBLE route 10.0.1.13 dev "+veth("web-3"),
		"MISSING rule 512: from all to 10.0.1.14 lookup main",
		// Without the runtime's word, web-7's rule stands or falls with
		// its veth, which --fix may not take.
		"LEAKED veth "+veth("web-7")+" (routed 10.0.1.17)",
		"LEAKED rule 512: from all to 10.0.1.99 lookup main [fix]",
		// The leak's harm: web-6 on eth1 reaches the address through main.
		"MISROUTE traffic from 10.0.2.12 to 10.0.1.99",
	)
}

// TestRuntimeDecidesWhatIsLive: with the runtime's sandboxes, a gone pod's
// veth is a leak --fix may take, a ready pod's lost allocation is missing,
// a stopped sandbox's leftovers wait for the runtime's retried DEL.
func TestRuntimeDecidesWhatIsLive(t *testing.T) {
	w := newWorld(t)
	w.sandboxes = []Sandbox{}
	w.live("web-0", "10.0.1.11", kernel.TableMain)
	w.foreign()
	// web-7 is gone from the runtime; its veth, route and rule stayed.
	w.pod("web-7", "10.0.1.17", kernel.TableMain, false)
	// web-8 is ready, but ipamd lost its allocation (#3824).
	w.pod("web-8", "10.0.1.18", kernel.TableMain, false)
	w.sandbox("web-8", true)
	// web-2's sandbox is gone, its allocation stayed.
	w.allocate("web-2", "10.0.1.12")
	// web-3 is ready and allocated but has no veth routed.
	w.allocate("web-3", "10.0.1.13")
	w.sandbox("web-3", true)
	// web-4 is stopped: its DEL failed, the runtime retries it.
	w.pod("web-4", "10.0.1.14", kernel.TableMain, false)
	w.sandbox("web-4", false)
	// A veth of a gone pod with no address at all.
	w.must(w.h.AddVeth(kernel.VethSpec{Name: veth("web-9"), PeerName: "pweb-9"}))
	w.expect(
		"LEAKED veth "+veth("web-9")+" (no address routed) [fix]",
		"STRAY ALLOCATION allocation c-web-2 (default/web-2)",
		"MISSING host route to 10.0.1.13",
		"LEAKED rule 512: from all to 10.0.1.17 lookup main [fix]",
		"LEAKED veth "+veth("web-7")+" (routed 10.0.1.17) [fix]",
		"MISSING allocation of 10.0.1.18",
	)
}

// TestIpamdMemory: ipamd's word on an address's ENI finds a 1536 rule left
// by an earlier holder on another ENI (and the misroute it causes), a lost
// rule 1536, and a checkpoint that disagrees with ipamd.
func TestIpamdMemory(t *testing.T) {
	w := newWorld(t)
	w.sandboxes = []Sandbox{}
	w.ipamd = &IpamdView{Held: map[netip.Addr]Holder{}, Conflicts: []string{"10.0.1.40 is listed on eni-1 and eni-2"}}
	w.live("web-0", "10.0.1.11", kernel.TableMain)
	// 10.0.2.13 was on eth1 (table 2); its holder's rule stayed, and the
	// address is now web-6's on eth2 (table 3).
	w.must(w.h.RuleAdd(ownership.FromPodRule(netip.MustParseAddr("10.0.2.13"), 2)))
	w.live("web-6", "10.0.2.13", 3)
	// web-5 lost its rule 1536.
	w.pod("web-5", "10.0.2.11", kernel.TableMain, false)
	w.allocate("web-5", "10.0.2.11")
	w.sandbox("web-5", true)
	w.holds("web-5", "10.0.2.11", 2)
	// The checkpoint gives 10.0.1.20 to web-1, ipamd to web-2.
	w.pod("web-1", "10.0.1.20", kernel.TableMain, false)
	w.sandbox("web-1", true)
	w.allocate("web-1", "10.0.1.20")
	w.holds("web-2", "10.0.1.20", kernel.TableMain)
	w.expect(
		"DOUBLE ipamd's ENIs",
		"DOUBLE address 10.0.1.20",
		// Without its rule, web-5's egress takes main, out of eth0.
		"MISROUTE traffic from 10.0.2.11 to 198.51.100.7",
		"MISSING rule 1536: from 10.0.2.11 lookup 2",
		"LEAKED rule 1536: from 10.0.2.13 lookup 2 [fix]",
		"MISROUTE traffic from 10.0.2.13 to 198.51.100.7",
	)
}

// TestBranchPods: a strict branch pod's rule 10 whose link is gone and a
// VLAN link no rule uses are leaks; a live standard branch pod (its 1536
// rule in a VLAN table, its address in no checkpoint) is not; a dead one's
// rules (its 1536, and its 512 that the 1536 ties to the VLAN) are
// reported but left to the operator.
func TestBranchPods(t *testing.T) {
	w := newWorld(t)
	trunk, err := w.h.LinkByName("eth1")
	w.must(err)
	for _, id := range []int{5, 6} {
		w.must(w.h.AddVlan(kernel.VlanSpec{Name: ownership.VlanLink(id), ParentIndex: trunk.Index, VlanID: id}))
	}
	// A live standard branch pod on VLAN 5.
	w.pod("sg-1", "10.0.1.30", ownership.VlanTable(5), false)
	// A strict branch pod's rules whose veth is gone.
	w.must(w.h.RuleAdd(ownership.IIFRule(kernel.FamilyV4, "vlan0123456789a", ownership.VlanTable(7))))
	// A dead standard branch pod's rule.
	w.must(w.h.RuleAdd(ownership.FromPodRule(netip.MustParseAddr("10.0.1.31"), ownership.VlanTable(5))))
	// Another's, of an address in no node ENI's subnet (a branch ENI's):
	// its rule 1536 into the VLAN's table ties its rule 512 to the VLAN.
	// A rule 512 of such an address with no tie is no pod's for all the
	// node shows.
	w.must(w.h.RuleAdd(ownership.FromPodRule(netip.MustParseAddr("10.1.0.41"), ownership.VlanTable(5))))
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.1.0.41"))))
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.1.0.42"))))
	w.foreign()
	w.expect(
		"LEAKED VLAN link vlan.eth.6 [fix]",
		"LEAKED rule 10: from all iif vlan0123456789a lookup 107 [fix]",
		"LEAKED rule 1536: from 10.0.1.31 lookup 105",
		"LEAKED rule 1536: from 10.1.0.41 lookup 105",
		"LEAKED rule 512: from all to 10.1.0.41 lookup main",
	)
}

// TestFixTakesOnlyLeaks: --fix removes exactly the fixable findings'
// objects; the healthy pods, the foreign rules and what it may not fix
// stay, and a second audit finds only what it left.
func TestFixTakesOnlyLeaks(t *testing.T) {
	w := newWorld(t)
	w.sandboxes = []Sandbox{}
	w.live("web-0", "10.0.1.11", kernel.TableMain)
	w.live("web-6", "10.0.2.12", 2)
	w.foreign()
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	w.pod("web-7", "10.0.2.17", 2, false)
	w.allocate("web-2", "10.0.1.12")
	foreignBefore := w.rules()

	fs := w.run()
	done, err := Fix(w.h, Stable(fs, w.run()))
	w.must(err)
	if len(done) != 4 {
		t.Fatalf("removed %v, want the three leaked rules and web-7's veth", done)
	}
	w.expect("STRAY ALLOCATION allocation c-web-2 (default/web-2)")
	after := w.rules()
	for _, r := range foreignBefore {
		if !slices.Contains(after, r) && !slices.ContainsFunc(done, func(d Removed) bool { return d.Finding.Object == r }) {
			t.Errorf("fix removed %s, which was no finding", r)
		}
	}
	if _, err := w.h.LinkByName(veth("web-0")); err != nil {
		t.Errorf("fix took a live pod's veth: %v", err)
	}
}

// TestFixLeavesAShadowedRule: a leaked rule 512 that a foreign rule listed
// before it would answer the delete request for stays, and Fix says why.
func TestFixLeavesAShadowedRule(t *testing.T) {
	w := newWorld(t)
	foreign := ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))
	foreign.IifName = "eth0"
	w.must(w.h.RuleAdd(foreign))
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	fs := w.run()
	done, err := Fix(w.h, Stable(fs, fs))
	var se *ownership.ShadowedRuleError
	if !asShadowed(err, &se) || len(done) != 1 || done[0].Done {
		t.Fatalf("fix = %v, %v; want the rule left with a ShadowedRuleError", done, err)
	}
	if !slices.Contains(w.rules(), kernel.RuleString(foreign)) {
		t.Fatal("fix removed the foreign rule")
	}
}

// TestStableNeedsBothAudits: a leak only the second audit sees (an ADD in
// flight at the first) is not planned.
func TestStableNeedsBothAudits(t *testing.T) {
	w := newWorld(t)
	first := w.run()
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	second := w.run()
	if len(second) != 1 || len(Stable(first, second)) != 0 || len(Stable(second, second)) != 1 {
		t.Fatalf("stable(%v, %v) = %v", first, second, Stable(first, second))
	}
}

// TestIpamdPoolDoesNotHideA2048Leak: ipamd answering does not narrow which
// rules are pods': #2048's rule 512 of an address ipamd gave back to EC2
// (another node's now) is still LEAKED, and its misroute still found.
// (Narrowed by the pool, the audit found nothing whenever ipamd answered.)
func TestIpamdPoolDoesNotHideA2048Leak(t *testing.T) {
	w := newWorld(t)
	w.sandboxes = []Sandbox{}
	pool := netip.MustParsePrefix("10.0.2.0/24")
	w.ipamd = &IpamdView{Held: map[netip.Addr]Holder{}, InPool: pool.Contains}
	w.live("web-6", "10.0.2.12", 2)
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	w.expect(
		"LEAKED rule 512: from all to 10.0.1.99 lookup main [fix]",
		"MISROUTE traffic from 10.0.2.12 to 10.0.1.99",
	)
	if fs := w.run(); !strings.Contains(fs[0].Reason, "pool no longer has the address") {
		t.Errorf("the reason does not say the address left ipamd's pool: %s", fs[0].Reason)
	}
}

// TestNoAllocationReadNoAllocationFinding: when neither the checkpoint nor
// ipamd was read (a corrupt checkpoint, ipamd down), that no allocation
// holds a ready pod's address is not known: no MISSING allocation. With an
// empty checkpoint read, it is.
func TestNoAllocationReadNoAllocationFinding(t *testing.T) {
	for _, read := range []bool{false, true} {
		w := newWorld(t)
		w.sandboxes = []Sandbox{}
		w.pod("web-8", "10.0.1.18", kernel.TableMain, false)
		w.sandbox("web-8", true)
		if read {
			w.allocs = []checkpoint.Allocation{}
			w.expect("MISSING allocation of 10.0.1.18")
		} else {
			w.expect()
		}
	}
}

// TestLivePodWithoutHostRouteKeepsItsRules: a ready pod whose host route
// is gone and whose allocation nobody can read (ipamd forgot it, or the
// checkpoint is unreadable) looks from the node like a gone pod's
// leftovers. Its rules are reported, but --fix leaves every rule no
// allocation holds while such a pod is on the node, and the lost route is
// MISSING. Once the runtime calls the pod gone, they are fixable again.
func TestLivePodWithoutHostRouteKeepsItsRules(t *testing.T) {
	for _, listed := range []bool{true, false} {
		for _, read := range []bool{false, true} {
			w := newWorld(t)
			w.sandboxes = []Sandbox{}
			w.pod("web-3", "10.0.2.13", 2, false)
			l, err := w.h.LinkByName(veth("web-3"))
			w.must(err)
			w.must(w.h.RouteDel(kernel.Route{Dst: ownership.IPNet(ownership.HostPrefix(netip.MustParseAddr("10.0.2.13"))), LinkIndex: l.Index, Scope: kernel.ScopeLink}))
			w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
			if read {
				w.allocs = []checkpoint.Allocation{}
			}
			if !listed {
				w.expect(
					"LEAKED veth "+veth("web-3")+" (no address routed) [fix]",
					"LEAKED rule 512: from all to 10.0.1.99 lookup main [fix]",
					"LEAKED rule 1536: from 10.0.2.13 lookup 2 [fix]",
					"LEAKED rule 512: from all to 10.0.2.13 lookup main [fix]",
				)
				continue
			}
			w.sandbox("web-3", true)
			w.expect(
				"MISSING host route to veth "+veth("web-3"),
				"LEAKED rule 512: from all to 10.0.1.99 lookup main",
				"LEAKED rule 1536: from 10.0.2.13 lookup 2",
				"LEAKED rule 512: from all to 10.0.2.13 lookup main",
			)
			fs := w.run()
			if !strings.Contains(fs[len(fs)-1].Reason, "may be that pod's") {
				t.Errorf("the reason does not say why --fix leaves the rule: %s", fs[len(fs)-1].Reason)
			}
		}
	}
}
