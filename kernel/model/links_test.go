package model

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

func TestNewNamespace(t *testing.T) {
	k := New()
	must(t, k.AddNamespace("ns"))
	wantErrno(t, k.AddNamespace("ns"), syscall.EEXIST)
	h, _ := k.Open("ns")
	links, _ := h.LinkList()
	if len(links) != 1 || links[0].Name != "lo" || links[0].Index != 1 || links[0].Up || links[0].Kind != kernel.KindLoopback {
		t.Fatalf("links of a new namespace: %+v", links)
	}
	if as, _ := h.AddrList(0, kernel.FamilyAll); len(as) != 0 {
		t.Fatalf("addresses before lo is up: %v", as)
	}
	must(t, h.LinkSetUp("lo"))
	as, _ := h.AddrList(1, kernel.FamilyAll)
	if len(as) != 2 || as[0].IPNet.String() != "127.0.0.1/8" || as[1].IPNet.String() != "::1/128" || as[0].Scope != kernel.ScopeHost {
		t.Fatalf("lo addresses: %+v", as)
	}
	var rules []string
	rs, _ := h.RuleList(kernel.FamilyAll)
	for _, r := range rs {
		rules = append(rules, kernel.RuleString(r))
	}
	want := []string{"rule 0: from all lookup local", "rule 32766: from all lookup main", "rule 32767: from all lookup default",
		"rule 0: inet6 from all lookup local", "rule 32766: inet6 from all lookup main"}
	if len(rules) != len(want) {
		t.Fatalf("default rules %q", rules)
	}
	for i := range want {
		if rules[i] != want[i] {
			t.Fatalf("default rules %q, want %q", rules, want)
		}
	}
	if got := k.Namespaces(); len(got) != 1 || got[0] != "ns" || !k.HasNamespace("ns") {
		t.Fatalf("namespaces %v", got)
	}
}

func TestOpen(t *testing.T) {
	k := New()
	must(t, k.AddNamespace("node"))
	if _, err := k.Open("nope"); !errors.Is(err, kernel.ErrNamespaceGone) {
		t.Fatalf("open of an unknown namespace: %v", err)
	}
	h, err := k.Opener("node").Open("")
	must(t, err)
	must(t, h.AddBridge("br0", 0))
	if _, err := k.Opener("node").Open("nope"); !errors.Is(err, kernel.ErrNamespaceGone) {
		t.Fatalf("opener of an unknown namespace: %v", err)
	}
	// A handle stays bound to the namespace it opened, not to the path.
	must(t, k.DeleteNamespace("node"))
	must(t, k.AddNamespace("node"))
	if _, err := h.LinkList(); !errors.Is(err, kernel.ErrNamespaceGone) {
		t.Fatalf("handle on a deleted namespace: %v", err)
	}
	if err := k.DeleteNamespace("nope"); !errors.Is(err, kernel.ErrNamespaceGone) {
		t.Fatalf("delete of an unknown namespace: %v", err)
	}
	must(t, h.Close())
	if _, err := h.LinkList(); errnoOf(err) != syscall.EBADF {
		t.Fatalf("closed handle: %v", err)
	}
}

func TestLinkNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		want syscall.Errno
	}{
		{"fifteen-chars-x", 0},
		{"sixteen-chars-xx", syscall.ERANGE}, // as Linux answers: the attribute is too long
		{"", syscall.EINVAL},
		{"a/b", syscall.EINVAL},
		{"a b", syscall.EINVAL},
		{"enia", syscall.EEXIST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			wantErrno(t, w.node.AddBridge(tc.name, 0), tc.want)
			wantErrno(t, w.node.LinkDel("br-missing"), syscall.ENODEV)
			if tc.want == 0 {
				must(t, w.node.LinkDel(tc.name))
			}
			wantErrno(t, w.pod.AddVeth(kernel.VethSpec{Name: "veth9", PeerName: tc.name, PeerNamespace: w.node}), tc.want)
			if tc.want != 0 {
				wantErrno(t, w.node.AddVeth(kernel.VethSpec{Name: tc.name, PeerName: "x9", PeerNamespace: w.pod}), tc.want)
				_, err := w.k.AddDevice("node", tc.name, 0, nil)
				wantErrno(t, err, tc.want)
			}
		})
	}
}

func TestLinkLookups(t *testing.T) {
	w := newWorld(t)
	_, err := w.node.LinkByName("nope")
	wantErrno(t, err, syscall.ENODEV)
	if !kernel.IsNotFound(err) {
		t.Fatal("missing link is not IsNotFound")
	}
	_, err = w.node.LinkByIndex(99)
	wantErrno(t, err, syscall.ENODEV)
	wantErrno(t, w.node.LinkDel("nope"), syscall.ENODEV)
	wantErrno(t, w.node.LinkSetUp("nope"), syscall.ENODEV)
	wantErrno(t, w.node.LinkDel("lo"), syscall.EOPNOTSUPP)
	l, err := w.node.LinkByIndex(w.eth0)
	must(t, err)
	if l.Name != "eth0" || l.Kind != kernel.KindDevice || l.MTU != 9001 || !l.Up || len(l.HardwareAddr) != 6 {
		t.Fatalf("device %+v", l)
	}
	l.HardwareAddr[0] = 0xff // a copy: the model is not affected
	if l2, _ := w.node.LinkByIndex(w.eth0); l2.HardwareAddr[0] == 0xff {
		t.Fatal("LinkByIndex returned the model's own slice")
	}
}

func TestIndexesGrowAndAreNotReused(t *testing.T) {
	w := newWorld(t)
	must(t, w.node.AddBridge("br0", 0))
	a := w.index(t, w.node, "br0")
	must(t, w.node.LinkDel("br0"))
	must(t, w.node.AddBridge("br0", 0))
	if b := w.index(t, w.node, "br0"); b <= a {
		t.Fatalf("index %d after %d: reused", b, a)
	}
}

func TestVethPairAcrossNamespaces(t *testing.T) {
	w := newWorld(t)
	a, err := w.pod.LinkByName("eth0")
	must(t, err)
	b, err := w.node.LinkByName("enia")
	must(t, err)
	if a.Kind != kernel.KindVeth || a.ParentIndex != b.Index || b.ParentIndex != a.Index || a.MTU != 9001 || b.MTU != 9001 {
		t.Fatalf("pair %+v %+v", a, b)
	}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 7}
	must(t, w.node.AddVeth(kernel.VethSpec{Name: "va", PeerName: "vb", PeerHardwareAddr: mac}))
	vb, _ := w.node.LinkByName("vb")
	if vb.HardwareAddr.String() != mac.String() || vb.MTU != 1500 || vb.ParentIndex != w.index(t, w.node, "va") {
		t.Fatalf("same-namespace pair: %+v", vb)
	}
	wantErrno(t, w.node.AddVeth(kernel.VethSpec{Name: "vc", PeerName: "vc"}), syscall.EEXIST)
	other := New()
	must(t, other.AddNamespace("x"))
	oh, _ := other.Open("x")
	wantErrno(t, w.node.AddVeth(kernel.VethSpec{Name: "vd", PeerName: "ve", PeerNamespace: oh}), syscall.EINVAL)
}

// TestDeletionCascades: what goes with a link, a namespace, a parent; and
// that rules stay, which is why rules leak and routes do not.
func TestDeletionCascades(t *testing.T) {
	for _, tc := range []struct {
		name string
		del  func(w *world) error
	}{
		{"pod side of the veth", func(w *world) error { return w.pod.LinkDel("eth0") }},
		{"host side of the veth", func(w *world) error { return w.node.LinkDel("enia") }},
		{"pod namespace", func(w *world) error { return w.k.DeleteNamespace("pod") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			hv := w.index(t, w.node, "enia")
			must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("10.0.1.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink}))
			must(t, w.node.RouteAdd(kernel.Route{Table: 7, Dst: cidr("10.0.1.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink}))
			must(t, w.node.RouteAdd(kernel.Route{Dst: cidr("2001:db8::11/128"), LinkIndex: hv}))
			must(t, w.node.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.11/32"), Table: kernel.TableMain}))
			must(t, w.node.RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "enia", Table: 101}))
			must(t, w.node.NeighSet(kernel.Neigh{LinkIndex: hv, IP: ip("10.0.1.11"), State: kernel.NeighStatePermanent}))
			must(t, w.node.AddrAdd(hv, cidr("169.254.1.1/32")))
			must(t, w.node.SysctlSet("net/ipv6/conf/enia/accept_ra", "0"))
			pe := w.index(t, w.pod, "eth0")
			must(t, w.pod.AddrAdd(pe, cidr("10.0.1.11/32")))
			must(t, w.pod.RouteAdd(kernel.Route{Dst: cidr("169.254.1.1/32"), LinkIndex: pe, Scope: kernel.ScopeLink}))

			must(t, tc.del(w))
			if _, err := w.node.LinkByName("enia"); !kernel.IsNotFound(err) {
				t.Fatalf("host veth survived: %v", err)
			}
			if w.k.HasNamespace("pod") {
				if _, err := w.pod.LinkByName("eth0"); !kernel.IsNotFound(err) {
					t.Fatalf("pod veth survived: %v", err)
				}
				if rs, _ := w.pod.RouteList(kernel.FamilyAll, 0); len(rs) != 0 {
					t.Fatalf("pod routes survived: %v", rs)
				}
			}
			rs, _ := w.node.RouteList(kernel.FamilyAll, 0)
			for _, r := range rs {
				if r.LinkIndex == hv {
					t.Fatalf("route survived its link: %+v", r)
				}
			}
			if len(rulesAt(t, w.node, 512)) != 1 || len(rulesAt(t, w.node, 10)) != 1 {
				t.Fatal("rules must survive the device they name")
			}
			if nb, _ := w.node.NeighList(0, kernel.FamilyAll); len(nb) != 0 {
				t.Fatalf("neighbours survived: %v", nb)
			}
			if as, _ := w.node.AddrList(0, kernel.FamilyV4); len(as) != 1 {
				t.Fatalf("addresses survived: %v", as)
			}
			wantErrno(t, w.node.SysctlSet("net/ipv6/conf/enia/accept_ra", "0"), syscall.ENOENT)
			_, err := w.node.SysctlGet("net/ipv4/conf/enia/forwarding")
			wantErrno(t, err, syscall.ENOENT)
		})
	}
}

func TestVlan(t *testing.T) {
	w := newWorld(t)
	idx, err := w.k.AddDevice("node", "eth1", 9001, nil)
	must(t, err)
	must(t, w.node.AddVlan(kernel.VlanSpec{Name: "vlan.eth.7", ParentIndex: idx, VlanID: 7}))
	v, _ := w.node.LinkByName("vlan.eth.7")
	if v.Kind != kernel.KindVlan || v.ParentIndex != idx || v.VlanID != 7 || v.MTU != 9001 {
		t.Fatalf("vlan %+v", v)
	}
	wantErrno(t, w.node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: 999, VlanID: 7}), syscall.ENODEV)
	wantErrno(t, w.node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: idx, VlanID: 7}), syscall.EEXIST)
	wantErrno(t, w.node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: idx, VlanID: 4095}), syscall.ERANGE)
	wantErrno(t, w.node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: idx, VlanID: 8, MTU: 9002}), syscall.EINVAL)
	wantErrno(t, w.node.AddVlan(kernel.VlanSpec{Name: "v2", ParentIndex: 1, VlanID: 8}), syscall.EOPNOTSUPP)
	must(t, w.node.LinkSetUp("vlan.eth.7"))
	must(t, w.node.RouteAdd(kernel.Route{Table: 107, Dst: cidr("10.1.0.1/32"), LinkIndex: v.Index, Scope: kernel.ScopeLink}))
	must(t, w.node.LinkDel("eth1"))
	if _, err := w.node.LinkByName("vlan.eth.7"); !kernel.IsNotFound(err) {
		t.Fatal("vlan survived its parent")
	}
	if rs, _ := w.node.RouteList(kernel.FamilyV4, 107); len(rs) != 0 {
		t.Fatalf("vlan routes survived: %v", rs)
	}
}

func TestCloneIsDeep(t *testing.T) {
	w := newWorld(t)
	before := snapshot(t, w.node)
	c := w.k.Clone()
	cn, err := c.Open("node")
	must(t, err)
	cp, _ := c.Open("pod")
	must(t, cp.LinkDel("eth0")) // the peer in the clone's node goes, the original's stays
	must(t, cn.RuleAdd(kernel.Rule{Priority: 5, Family: kernel.FamilyV4, Table: 5}))
	if got := snapshot(t, w.node); len(got) != len(before) {
		t.Fatalf("the original changed with its clone:\n%q\n%q", before, got)
	}
	if _, err := cn.LinkByName("enia"); !kernel.IsNotFound(err) {
		t.Fatal("the clone's veth peer survived")
	}
	if _, err := w.node.LinkByName("enia"); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentUse is for the race detector: one mutex guards the machine.
func TestConcurrentUse(t *testing.T) {
	w := newWorld(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ns := "p" + string(rune('a'+i))
			if err := w.k.AddNamespace(ns); err != nil {
				t.Error(err)
				return
			}
			p, _ := w.k.Open(ns)
			name := "enx" + string(rune('a'+i))
			if err := p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: name, PeerNamespace: w.node}); err != nil {
				t.Error(err)
			}
			_, _ = w.node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.1.99")})
			_ = w.k.Clone()
			if err := w.k.DeleteNamespace(ns); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	links, _ := w.node.LinkList()
	if len(links) != 3 {
		t.Fatalf("links left: %+v", links)
	}
}
