package kernel_test

import (
	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"net"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// Shared helpers (internal/testsupport/ktest).
var (
	cidr = ktest.Prefix
	must = ktest.Must
)

// node builds a node namespace with a pod behind a veth, as the driver
// does, and returns its handle.
func node(t *testing.T) (*model.Kernel, kernel.API) {
	k := model.New()
	must(t, k.AddNamespace("node"))
	must(t, k.AddNamespace("pod"))
	h, _ := k.Open("node")
	p, _ := k.Open("pod")
	eth0, err := k.AddDevice("node", "eth0", 9001, nil)
	must(t, err)
	must(t, h.LinkSetUp("lo"))
	must(t, h.LinkSetUp("eth0"))
	must(t, h.AddrAdd(eth0, cidr("10.0.1.10/24")))
	must(t, h.AddrAdd(eth0, cidr("2001:db8:1::10/64")))
	must(t, h.AddrAdd(eth0, cidr("fe80::1234/64"))) // link-local: left out
	must(t, h.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: eth0}))
	must(t, h.RouteAdd(kernel.Route{Gw: net.ParseIP("fe80::1"), LinkIndex: eth0, Family: kernel.FamilyV6}))
	must(t, p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "eni1a2b3c4d5e6", PeerNamespace: h, MTU: 9001}))
	must(t, h.LinkSetUp("eni1a2b3c4d5e6"))
	hv, _ := h.LinkByName("eni1a2b3c4d5e6")
	must(t, h.RouteAdd(kernel.Route{Dst: cidr("10.0.1.15/32"), LinkIndex: hv.Index, Scope: kernel.ScopeLink}))
	must(t, h.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}))
	must(t, h.RuleAdd(kernel.Rule{Priority: 1536, Src: cidr("10.0.1.15/32"), Table: 2}))
	must(t, h.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("2001:db8:1::15/128"), Table: kernel.TableMain}))
	must(t, h.NeighSet(kernel.Neigh{LinkIndex: hv.Index, IP: net.ParseIP("10.0.1.15"), HardwareAddr: net.HardwareAddr{2, 0xaa, 0, 0, 0, 1},
		State: kernel.NeighStatePermanent}))
	must(t, h.NeighSet(kernel.Neigh{LinkIndex: hv.Index, IP: net.ParseIP("10.0.1.16"), State: 0x02})) // REACHABLE: left out
	must(t, h.AddVeth(kernel.VethSpec{Name: "va", PeerName: "vb"}))
	return k, h
}

func TestSnapshotLines(t *testing.T) {
	_, h := node(t)
	st, err := kernel.Snapshot(h)
	must(t, err)
	want := []string{
		"link eni1a2b3c4d5e6 veth up mtu 9001",
		"link eth0 device up mtu 9001",
		"link va veth down mtu 1500 peer vb",
		"link vb veth down mtu 1500 peer va",
		"addr 10.0.1.10/24 dev eth0",
		"addr 2001:db8:1::10/64 dev eth0",
		"route table main: 10.0.1.0/24 dev eth0 proto kernel scope link src 10.0.1.10",
		"route table main: 10.0.1.15/32 dev eni1a2b3c4d5e6 scope link",
		"route table main: 2001:db8:1::/64 dev eth0 proto kernel metric 256",
		"route table main: default via 10.0.1.1 dev eth0",
		"route table main: inet6 default via fe80::1 dev eth0 metric 1024",
		"rule 0: from all lookup local",
		"rule 512: from all to 10.0.1.15 lookup main",
		"rule 1536: from 10.0.1.15 lookup 2",
		"rule 32766: from all lookup main",
		"rule 32767: from all lookup default",
		"rule 0: inet6 from all lookup local",
		"rule 512: inet6 from all to 2001:db8:1::15 lookup main",
		"rule 32766: inet6 from all lookup main",
		"neigh 10.0.1.15 lladdr 02:aa:00:00:00:01 PERMANENT dev eni1a2b3c4d5e6",
	}
	got := st.Lines()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", st, strings.Join(want, "\n"))
	}
}

// TestDiffShowsWhatATeardownLeaves: deleting the pod's namespace takes the
// veth and its route; the rules it named are what Diff reports left.
func TestDiffShowsWhatATeardownLeaves(t *testing.T) {
	k := model.New()
	must(t, k.AddNamespace("node"))
	h, _ := k.Open("node")
	before, err := kernel.Snapshot(h)
	must(t, err)
	must(t, k.AddNamespace("pod"))
	p, _ := k.Open("pod")
	must(t, p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "enix", PeerNamespace: h}))
	must(t, h.LinkSetUp("enix"))
	hv, _ := h.LinkByName("enix")
	must(t, h.RouteAdd(kernel.Route{Dst: cidr("10.0.1.15/32"), LinkIndex: hv.Index, Scope: kernel.ScopeLink}))
	must(t, h.RuleAdd(kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}))
	during, _ := kernel.Snapshot(h)
	added, removed := kernel.Diff(before, during)
	if len(added) != 3 || len(removed) != 0 {
		t.Fatalf("added %q removed %q", added, removed)
	}
	must(t, k.DeleteNamespace("pod"))
	after, _ := kernel.Snapshot(h)
	added, removed = kernel.Diff(before, after)
	if len(added) != 1 || added[0] != "rule 512: from all to 10.0.1.15 lookup main" || len(removed) != 0 {
		t.Fatalf("left behind %q, removed %q", added, removed)
	}
	// Counted, not set-based: a second identical line shows.
	a := kernel.State{Rules: []string{"x"}}
	b := kernel.State{Rules: []string{"x", "x"}}
	if added, _ := kernel.Diff(a, b); len(added) != 1 {
		t.Fatalf("duplicate line not reported: %q", added)
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{kernel.TableString(254), "main"},
		{kernel.TableString(255), "local"},
		{kernel.TableString(253), "default"},
		{kernel.TableString(101), "101"},
		{kernel.RuleString(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan.eth.1", Table: 101}), "rule 10: from all iif vlan.eth.1 lookup 101"},
		{kernel.RuleString(kernel.Rule{Priority: 7, Family: kernel.FamilyV4, Src: cidr("10.1.0.0/16"), Mark: 0x80, Mask: 0x80, OifName: "eth1", Table: 3}),
			"rule 7: from 10.1.0.0/16 fwmark 0x80/0x80 oif eth1 lookup 3"},
		{kernel.RouteString(kernel.Route{Table: 2, Type: kernel.RouteTypeLocal, Dst: cidr("10.0.0.1/32"), LinkIndex: 3, Scope: kernel.ScopeHost},
			func(int) string { return "eth1" }), "route table 2: local 10.0.0.1/32 dev eth1 scope host"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
