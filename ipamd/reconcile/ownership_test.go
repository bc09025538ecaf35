package reconcile_test

import (
	"net"
	"slices"
	"testing"

	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/reconcile/internal/scene"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// TestOwnsOnlyExactPodRules: shape by shape, what ipamd owns.
func TestOwnsOnlyExactPodRules(t *testing.T) {
	pool := scene.NewPool(scene.Ranges...)
	w := modelWorld(t)
	must(t, w.Prepare())
	node, err := ownership.ReadNode(w.Node)
	must(t, err)
	scope := ownership.Scope{Node: node, InPool: pool.IsPodAddress}
	v4, v6 := kernel.FamilyV4, kernel.FamilyV6
	pod := scene.Addr("10.0.1.5")
	pod6 := scene.Addr("2600:1f14:1:1::5")
	sixteen := &net.IPNet{IP: net.ParseIP("10.0.1.5"), Mask: net.CIDRMask(32, 32)} // 16-byte form
	mapped := &net.IPNet{IP: net.ParseIP("::ffff:10.0.1.5"), Mask: net.CIDRMask(128, 128)}
	branch := ownership.HostVeth(ownership.StrictVethPrefix, "default", "sg-0")
	with := func(r kernel.Rule, f func(*kernel.Rule)) kernel.Rule { f(&r); return r }
	cases := []struct {
		name string
		rule kernel.Rule
		want reconcile.Owned // zero: not owned
	}{
		{"to pod", scene.ToPod(pod), reconcile.Owned{Kind: reconcile.KindRuleToPod, IP: pod}},
		{"to pod, 16-byte address", kernel.Rule{Priority: 512, Family: v4, Dst: sixteen, Table: kernel.TableMain}, reconcile.Owned{Kind: reconcile.KindRuleToPod, IP: pod}},
		{"to pod v6", scene.ToPod(pod6), reconcile.Owned{Kind: reconcile.KindRuleToPod, IP: pod6}},
		{"to a /24", kernel.Rule{Priority: 512, Family: v4, Dst: scene.Net("10.0.1.0/24"), Table: kernel.TableMain}, reconcile.Owned{}},
		{"to pod, table 2", with(scene.ToPod(pod), func(r *kernel.Rule) { r.Table = 2 }), reconcile.Owned{}},
		{"to pod, table local", with(scene.ToPod(pod), func(r *kernel.Rule) { r.Table = kernel.TableLocal }), reconcile.Owned{}},
		{"to pod with src", with(scene.ToPod(pod), func(r *kernel.Rule) { r.Src = scene.Net("10.0.0.0/8") }), reconcile.Owned{}},
		{"to pod with iif", with(scene.ToPod(pod), func(r *kernel.Rule) { r.IifName = "eth0" }), reconcile.Owned{}},
		{"to pod with oif", with(scene.ToPod(pod), func(r *kernel.Rule) { r.OifName = "eth0" }), reconcile.Owned{}},
		{"to pod with fwmark", with(scene.ToPod(pod), func(r *kernel.Rule) { r.Mark, r.Mask = 0x80, 0x80 }), reconcile.Owned{}},
		{"to a non-pool address", scene.ToPod(scene.Addr("192.168.1.5")), reconcile.Owned{}},
		{"to an IPv4-mapped IPv6 address", kernel.Rule{Priority: 512, Family: v6, Dst: mapped, Table: kernel.TableMain}, reconcile.Owned{}},
		{"family mismatch", with(scene.ToPod(pod), func(r *kernel.Rule) { r.Family = v6 }), reconcile.Owned{}},
		{"from pod on eth0, table 2", scene.FromPod(pod, 2), reconcile.Owned{}},
		{"from pod on eth1, table 2", scene.FromPod(scene.Addr("10.0.2.5"), 2), reconcile.Owned{Kind: reconcile.KindRuleFromPod, IP: scene.Addr("10.0.2.5")}},
		// The pod path never makes a 1536 rule into main, and the node
		// says which table an address's ENI uses: eth0's is main, eth1's 2.
		{"from pod, table main", scene.FromPod(pod, kernel.TableMain), reconcile.Owned{}},
		{"from pod on eth1, table 3", scene.FromPod(scene.Addr("10.0.2.5"), 3), reconcile.Owned{}},
		{"from pod v6, table 10001", scene.FromPod(pod6, 10001), reconcile.Owned{}},
		{"to the primary ENI's own address", scene.ToPod(scene.Addr("10.0.1.10")), reconcile.Owned{}},
		{"to eth1's own address", scene.ToPod(scene.Addr("10.0.2.10")), reconcile.Owned{}},
		{"to a pool address in no ENI subnet", scene.ToPod(scene.Addr("10.0.3.5")), reconcile.Owned{}},
		{"from pod, table default", scene.FromPod(pod, kernel.TableDefault), reconcile.Owned{}},
		{"from pod, table local", scene.FromPod(pod, kernel.TableLocal), reconcile.Owned{}},
		{"from pod, table 1", scene.FromPod(pod, 1), reconcile.Owned{}},
		{"from pod with dst", with(scene.FromPod(pod, 2), func(r *kernel.Rule) { r.Dst = scene.Net("8.8.8.8/32") }), reconcile.Owned{}},
		{"from a non-pool address", scene.FromPod(scene.Addr("192.168.7.7"), 2), reconcile.Owned{}},
		{"from a /28", kernel.Rule{Priority: 1536, Family: v4, Src: scene.Net("10.0.1.0/28"), Table: 2}, reconcile.Owned{}},
		{"from pod at 1535", with(scene.FromPod(pod, 2), func(r *kernel.Rule) { r.Priority = 1535 }), reconcile.Owned{}},
		{"iif branch veth", scene.IIF(v4, branch, 107), reconcile.Owned{Kind: reconcile.KindRuleIIF, Link: branch}},
		{"iif branch veth v6", scene.IIF(v6, branch, 4194), reconcile.Owned{Kind: reconcile.KindRuleIIF, Link: branch}},
		{"iif VLAN link", scene.IIF(v4, "vlan.eth.7", 107), reconcile.Owned{Kind: reconcile.KindRuleIIF, Link: "vlan.eth.7"}},
		{"iif VLAN link, another VLAN's table", scene.IIF(v4, "vlan.eth.7", 108), reconcile.Owned{}},
		{"iif VLAN link, leading zero", scene.IIF(v4, "vlan.eth.07", 107), reconcile.Owned{}},
		{"iif VLAN 153 (table default)", scene.IIF(v4, "vlan.eth.153", 253), reconcile.Owned{}},
		{"iif branch veth, table 2", scene.IIF(v4, branch, 2), reconcile.Owned{}},
		{"iif branch veth, table 4195", scene.IIF(v4, branch, 4195), reconcile.Owned{}},
		{"iif eni veth", scene.IIF(v4, ownership.HostVeth("eni", "default", "sg-0"), 107), reconcile.Owned{}},
		{"iif upper-case hash", scene.IIF(v4, "vlanABCDEF01234", 107), reconcile.Owned{}},
		{"iif short hash", scene.IIF(v4, branch[:len(branch)-1], 107), reconcile.Owned{}},
		{"iif with fwmark", with(scene.IIF(v4, branch, 107), func(r *kernel.Rule) { r.Mark, r.Mask = 1, 0xffffffff }), reconcile.Owned{}},
		{"iif with src", with(scene.IIF(v4, branch, 107), func(r *kernel.Rule) { r.Src = scene.Host(pod) }), reconcile.Owned{}},
		{"iif with oif", with(scene.IIF(v4, branch, 107), func(r *kernel.Rule) { r.OifName = "eth0" }), reconcile.Owned{}},
		{"main rule", kernel.Rule{Priority: 32766, Family: v4, Table: kernel.TableMain}, reconcile.Owned{}},
	}
	for _, c := range cases {
		got, ok := reconcile.Owns(c.rule, scope)
		if ok != (c.want != reconcile.Owned{}) || got != c.want {
			t.Errorf("%s (%s): Owns = %+v, %v; want %+v", c.name, kernel.RuleString(c.rule), got, ok, c.want)
		}
	}
}

// TestRebuildReadsPodsBack: host veths of several prefixes, IPv4 and IPv6,
// tables from the 1536 rules; routes that are not a pod's are ignored.
func TestRebuildReadsPodsBack(t *testing.T) {
	w := modelWorld(t)
	must(t, w.Prepare())
	prefixes := []string{"eni", "vlan", "cust"}
	mk := func(prefix, name, ip string, table int) string {
		hv, err := w.Pod(prefix, "default", name, scene.Addr(ip), table, true)
		must(t, err)
		return hv
	}
	a := mk("eni", "a", "10.0.1.11", kernel.TableMain)
	b := mk("eni", "b", "10.0.2.11", 2)
	c := mk("cust", "c", "2600:1f14:1:1::11", kernel.TableMain)
	d := mk("vlan", "d", "10.0.2.12", 107) // a standard-mode branch pod
	e := mk("eni", "e", "2600:1f14:1:1::12", 10001)
	mk("eni", "outside", "192.168.5.5", kernel.TableMain) // not a pool address
	mk("abc", "other", "10.0.1.20", kernel.TableMain)     // a prefix not given
	// A pool address routed to a veth named like no pod, and to an ENI.
	pod, err := w.NewPodNS()
	must(t, err)
	must(t, pod.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "eni123", PeerNamespace: w.Node}))
	must(t, w.Node.LinkSetUp("eni123"))
	for _, r := range []kernel.Route{
		{Dst: scene.Net("10.0.1.30/32"), LinkIndex: index(t, w.Node, "eni123"), Scope: kernel.ScopeLink},
		{Dst: scene.Net("10.0.1.31/32"), LinkIndex: index(t, w.Node, "eth0"), Scope: kernel.ScopeLink},
		// A second route for a's address, at a worse metric, to b's veth.
		{Dst: scene.Net("10.0.1.11/32"), LinkIndex: index(t, w.Node, b), Scope: kernel.ScopeLink, Priority: 100},
		// Only in table 2: not a pod's host route.
		{Table: 2, Dst: scene.Net("10.0.2.40/32"), LinkIndex: index(t, w.Node, b), Scope: kernel.ScopeLink},
	} {
		must(t, w.Node.RouteAdd(r))
	}
	pool := scene.NewPool(scene.Ranges...)
	got, err := reconcile.Rebuild(w.Node, pool.IsPodAddress, prefixes)
	must(t, err)
	want := []reconcile.Recovered{
		{IP: scene.Addr("10.0.1.11"), HostVeth: a, HostVethIndex: index(t, w.Node, a), Table: kernel.TableMain},
		{IP: scene.Addr("10.0.2.11"), HostVeth: b, HostVethIndex: index(t, w.Node, b), Table: 2},
		// d's and e's 1536 rules name tables that are not their ENI's (the
		// node says eth1 uses 2, eth0 main): not pod rules, no table read.
		{IP: scene.Addr("10.0.2.12"), HostVeth: d, HostVethIndex: index(t, w.Node, d), Table: kernel.TableMain},
		{IP: scene.Addr("2600:1f14:1:1::11"), HostVeth: c, HostVethIndex: index(t, w.Node, c), Table: kernel.TableMain},
		{IP: scene.Addr("2600:1f14:1:1::12"), HostVeth: e, HostVethIndex: index(t, w.Node, e), Table: kernel.TableMain},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Rebuild:\n got %+v\nwant %+v", got, want)
	}
}

func index(t *testing.T, k kernel.API, name string) int {
	t.Helper()
	l, err := k.LinkByName(name)
	must(t, err)
	return l.Index
}

// TestIsHostVeth: a prefix and exactly the 11 lowercase hex digits.
func TestIsHostVeth(t *testing.T) {
	hv := ownership.HostVeth("eni", "default", "web-0")
	for name, want := range map[string]bool{
		hv: true, hv[:len(hv)-1]: false, hv + "0": false, "eniABCDEF01234": false,
		"vlan.eth.7": false, "eth0": false, "cust" + hv[3:]: false,
	} {
		if got := ownership.IsHostVeth(name, []string{"eni", ""}); got != want {
			t.Errorf("IsHostVeth(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestRebuildOnForeignRulesNode: on the busy node, Rebuild finds exactly
// the live pods on pool addresses, the one the pool forgot included, and
// none of the look-alike rules or routes.
func TestRebuildOnForeignRulesNode(t *testing.T) {
	w := modelWorld(t)
	c, err := scene.ForeignRules(w, t0)
	must(t, err)
	got, err := reconcile.Rebuild(w.Node, c.Pool.IsPodAddress, c.VethPrefixes)
	must(t, err)
	if !slices.Equal(got, c.Live) {
		t.Fatalf("Rebuild:\n got %+v\nwant %+v", got, c.Live)
	}
}

// TestOwnsOnlyPodPriorities: a rule of the exact pod shape (to <pool
// address> lookup main, from <pool address> lookup <pod table>) at any
// priority other than 512/1536 is somebody else's, and the reconciler
// must never delete it.
func TestOwnsOnlyPodPriorities(t *testing.T) {
	pool := scene.NewPool(scene.Ranges...)
	w := modelWorld(t)
	must(t, w.Prepare())
	node, err := ownership.ReadNode(w.Node)
	must(t, err)
	scope := ownership.Scope{Node: node, InPool: pool.IsPodAddress}
	pod := scene.Addr("10.0.1.5")
	for _, prio := range []int{0, 10, 100, 511, 513, 1000, 1535, 1537, 32765, 32766} {
		for _, r := range []kernel.Rule{scene.ToPod(pod), scene.FromPod(pod, 3)} {
			r.Priority = prio
			if o, ok := reconcile.Owns(r, scope); ok {
				t.Errorf("Owns(%s) = %+v, want not owned", kernel.RuleString(r), o)
			}
		}
	}
}
