package model

import (
	"net"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

func cidr(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	if ones, bits := n.Mask.Size(); ones == bits {
		return n
	}
	n.IP = ip
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErrno(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", errno)
	}
	if e, ok := underlying(err); !ok || e != errno {
		t.Fatalf("error %v, want %v", err, errno)
	}
}

func underlying(err error) (syscall.Errno, bool) {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return e, true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return 0, false
		}
		err = u.Unwrap()
	}
	return 0, false
}

// world: a node with eth0 and a pod with a veth pair across.
func world(t *testing.T) (*Kernel, kernel.API, kernel.API) {
	k := New()
	must(t, k.AddNamespace("node"))
	must(t, k.AddNamespace("pod"))
	node, _ := k.Open("node")
	pod, _ := k.Open("pod")
	_, err := k.AddDevice("node", "eth0", 9001, nil)
	must(t, err)
	must(t, pod.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "enia", PeerNamespace: node, MTU: 9001}))
	return k, node, pod
}

func TestVethPairAcrossNamespaces(t *testing.T) {
	_, node, pod := world(t)
	a, err := pod.LinkByName("eth0")
	must(t, err)
	b, err := node.LinkByName("enia")
	must(t, err)
	if a.Kind != kernel.KindVeth || a.ParentIndex != b.Index || b.ParentIndex != a.Index || a.Up {
		t.Fatalf("pair %+v %+v", a, b)
	}
	wantErrno(t, pod.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "x", PeerNamespace: node}), syscall.EEXIST)
	wantErrno(t, pod.AddVeth(kernel.VethSpec{Name: "eth1", PeerName: "enia", PeerNamespace: node}), syscall.EEXIST)
	must(t, node.AddBridge("fifteen-chars-x", 0)) // 15 bytes: the limit
}

func TestLongNameIsERANGE(t *testing.T) {
	_, node, _ := world(t)
	wantErrno(t, node.AddBridge("sixteen-chars-xx", 0), syscall.ERANGE)
	wantErrno(t, node.AddBridge("", 0), syscall.EINVAL)
}

// TestLinkDeletionTakesRoutesNotRules is why rules leak and routes do not.
func TestLinkDeletionTakesRoutesNotRules(t *testing.T) {
	_, node, pod := world(t)
	hv, _ := node.LinkByName("enia")
	must(t, node.RouteAdd(kernel.Route{Dst: cidr("10.0.1.11/32"), LinkIndex: hv.Index, Scope: kernel.ScopeLink}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.11/32"), Table: kernel.TableMain}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "enia", Table: 101}))
	must(t, node.NeighSet(kernel.Neigh{LinkIndex: hv.Index, IP: net.ParseIP("10.0.1.11"), State: kernel.NeighStatePermanent}))
	must(t, node.SysctlSet("net/ipv6/conf/enia/accept_ra", "0"))
	must(t, pod.LinkDel("eth0")) // the pod side: the peer goes too
	if _, err := node.LinkByName("enia"); !kernel.IsNotFound(err) {
		t.Fatalf("peer survived: %v", err)
	}
	rs, _ := node.RouteList(kernel.FamilyV4, kernel.TableMain)
	for _, r := range rs {
		if r.LinkIndex == hv.Index {
			t.Fatalf("route survived its link: %+v", r)
		}
	}
	rules, _ := node.RuleList(kernel.FamilyV4)
	n := 0
	for _, r := range rules {
		if r.Priority == 512 || r.Priority == 10 {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("rules must survive the device they name: %d of 2 left", n)
	}
	if nb, _ := node.NeighList(0, kernel.FamilyAll); len(nb) != 0 {
		t.Fatalf("neighbours survived: %v", nb)
	}
	wantErrno(t, node.SysctlSet("net/ipv6/conf/enia/accept_ra", "0"), syscall.ENOENT)
}

func TestNamespaceDeletionTakesPeers(t *testing.T) {
	k, node, _ := world(t)
	must(t, k.DeleteNamespace("pod"))
	if _, err := node.LinkByName("enia"); !kernel.IsNotFound(err) {
		t.Fatalf("peer in node survived: %v", err)
	}
	if _, err := k.Open("pod"); err == nil {
		t.Fatal("deleted namespace opens")
	}
	if k.HasNamespace("pod") {
		t.Fatal("still listed")
	}
}

func TestVlanGoesWithParent(t *testing.T) {
	k, node, _ := world(t)
	idx, _ := k.AddDevice("node", "eth1", 9001, nil)
	must(t, node.AddVlan(kernel.VlanSpec{Name: "vlan.eth.7", ParentIndex: idx, VlanID: 7}))
	v, _ := node.LinkByName("vlan.eth.7")
	must(t, node.RouteAdd(kernel.Route{Table: 107, Dst: cidr("10.1.0.1/32"), LinkIndex: v.Index, Scope: kernel.ScopeLink}))
	wantErrno(t, node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: 999, VlanID: 7}), syscall.ENODEV)
	must(t, node.LinkDel("eth1"))
	if _, err := node.LinkByName("vlan.eth.7"); !kernel.IsNotFound(err) {
		t.Fatal("vlan survived its parent")
	}
	if rs, _ := node.RouteList(kernel.FamilyV4, 107); len(rs) != 0 {
		t.Fatalf("vlan routes survived: %v", rs)
	}
}

func TestRuleSemantics(t *testing.T) {
	_, node, _ := world(t)
	r := kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}
	must(t, node.RuleAdd(r))
	wantErrno(t, node.RuleAdd(r), syscall.EEXIST)
	must(t, node.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 3}))
	// Wildcards: prio + src deletes the first match (table 2, added first).
	must(t, node.RuleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32")}))
	rules, _ := node.RuleList(kernel.FamilyV4)
	var left []int
	for _, x := range rules {
		if x.Priority == 1536 {
			left = append(left, x.Table)
		}
	}
	if len(left) != 1 || left[0] != 3 {
		t.Fatalf("left %v, want [3]", left)
	}
	wantErrno(t, node.RuleDel(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}), syscall.ENOENT)
	wantErrno(t, node.RuleDel(kernel.Rule{Priority: 512, Dst: cidr("10.9.9.9/32")}), syscall.ENOENT)
}

func TestRouteSemantics(t *testing.T) {
	_, node, _ := world(t)
	eth0, _ := node.LinkByName("eth0")
	must(t, node.LinkSetUp("eth0"))
	must(t, node.AddrAdd(eth0.Index, cidr("10.0.1.10/24")))
	wantErrno(t, node.AddrAdd(eth0.Index, cidr("10.0.1.10/24")), syscall.EEXIST)
	r := kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: eth0.Index}
	must(t, node.RouteAdd(r))
	wantErrno(t, node.RouteAdd(r), syscall.EEXIST)
	must(t, node.RouteReplace(r))
	wantErrno(t, node.RouteAdd(kernel.Route{Table: 5, Gw: net.ParseIP("192.0.2.1"), LinkIndex: eth0.Index}), syscall.ENETUNREACH)
	wantErrno(t, node.RouteAdd(kernel.Route{Dst: cidr("10.5.0.0/16"), LinkIndex: 99}), syscall.ENODEV)
	wantErrno(t, node.RouteDel(kernel.Route{Dst: cidr("10.5.0.0/16")}), syscall.ESRCH)
	must(t, node.RouteDel(kernel.Route{Gw: net.ParseIP("10.0.1.1"), Family: kernel.FamilyV4}))
	must(t, node.AddrDel(eth0.Index, cidr("10.0.1.10/24")))
	if rs, _ := node.RouteList(kernel.FamilyV4, 0); len(rs) != 0 {
		t.Fatalf("address routes survived the address: %v", rs)
	}
}

// TestRouteGetByRulePriority is the harm of #2048 on the model: a leaked
// `to X lookup main` at 512 beats the pod's own `from Y lookup 2` at 1536.
func TestRouteGetByRulePriority(t *testing.T) {
	k, node, _ := world(t)
	eth0, _ := node.LinkByName("eth0")
	i1, _ := k.AddDevice("node", "eth1", 9001, nil)
	must(t, node.LinkSetUp("eth0"))
	must(t, node.LinkSetUp("eth1"))
	must(t, node.AddrAdd(eth0.Index, cidr("10.0.1.10/24")))
	must(t, node.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: eth0.Index}))
	must(t, node.RouteAdd(kernel.Route{Table: 2, Dst: cidr("10.0.2.1/32"), LinkIndex: i1, Scope: kernel.ScopeLink}))
	must(t, node.RouteAdd(kernel.Route{Table: 2, Gw: net.ParseIP("10.0.2.1"), LinkIndex: i1}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("10.0.2.11/32"), Table: 2}))
	q := kernel.RouteQuery{Dst: net.ParseIP("10.0.1.99"), Src: net.ParseIP("10.0.2.11"), IifName: "enia"}
	res, err := node.RouteGet(q)
	must(t, err)
	if res.LinkName != "eth1" || res.RulePrio != 1536 {
		t.Fatalf("before the leak: %+v", res)
	}
	must(t, node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.99/32"), Table: kernel.TableMain}))
	res, err = node.RouteGet(q)
	must(t, err)
	if res.LinkName != "eth0" || res.RulePrio != 512 {
		t.Fatalf("after the leak: %+v", res)
	}
	// Longest prefix within a table; iif rules never match local traffic.
	must(t, node.RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "enia", Table: 2}))
	if res, _ := node.RouteGet(kernel.RouteQuery{Dst: net.ParseIP("10.0.1.99")}); res.LinkName != "eth0" {
		t.Fatalf("local lookup took the iif rule: %+v", res)
	}
	if res, _ := node.RouteGet(q); res.LinkName != "eth1" || res.RulePrio != 10 {
		t.Fatalf("iif rule ignored: %+v", res)
	}
	must(t, node.RuleDel(kernel.Rule{Priority: 32766, Table: kernel.TableMain, Family: kernel.FamilyV4}))
	must(t, node.RuleDel(kernel.Rule{Priority: 512, Family: kernel.FamilyV4}))
	if _, err := node.RouteGet(kernel.RouteQuery{Dst: net.ParseIP("192.0.2.9")}); !isErrno(err, syscall.ENETUNREACH) {
		t.Fatalf("no route: %v", err)
	}
}

func isErrno(err error, e syscall.Errno) bool { x, ok := underlying(err); return ok && x == e }

func TestClosedHandle(t *testing.T) {
	_, node, _ := world(t)
	node.Close()
	if _, err := node.LinkList(); !isErrno(err, syscall.EBADF) {
		t.Fatalf("closed handle: %v", err)
	}
}
