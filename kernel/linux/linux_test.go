package linux

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/internal/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

func cidr(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	if ones, bits := n.Mask.Size(); ones != bits {
		n.IP = ip
	}
	return n
}

// realPair makes a node and a pod namespace and opens handles on them;
// everything is removed when the test ends, pass or fail.
func realPair(t *testing.T) (node, pod kernel.API) {
	t.Helper()
	testns.Require(t)
	var hs []kernel.API
	for _, p := range []string{"vpccni-knode", "vpccni-kpod"} {
		ns, err := testns.New(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h, err := Opener{}.Open(ns.Path())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs = append(hs, h)
	}
	return hs[0], hs[1]
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var hostMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}

// sequence is the same small workload for the model and the kernel: a pod
// on a secondary ENI as the driver builds it, then the pod side deleted.
func sequence(t *testing.T, node, pod kernel.API, stage func(string)) {
	must(t, node.AddBridge("eth1", 9001))
	must(t, node.LinkSetUp("eth1"))
	eth1, _ := node.LinkByName("eth1")
	must(t, node.AddrAdd(eth1.Index, cidr("10.0.2.10/24")))
	must(t, node.RouteAdd(kernel.Route{Table: 2, Dst: cidr("10.0.2.1/32"), LinkIndex: eth1.Index, Scope: kernel.ScopeLink}))
	must(t, node.RouteAdd(kernel.Route{Table: 2, Gw: net.ParseIP("10.0.2.1"), LinkIndex: eth1.Index}))
	must(t, pod.AddVeth(kernel.VethSpec{Name: "eth0", MTU: 9001, PeerName: "enihost", PeerNamespace: node, PeerHardwareAddr: hostMAC}))
	must(t, node.LinkSetUp("enihost"))
	must(t, pod.LinkSetUp("eth0"))
	e0, _ := pod.LinkByName("eth0")
	hv, _ := node.LinkByName("enihost")
	must(t, pod.RouteReplace(kernel.Route{Dst: cidr("169.254.1.1/32"), LinkIndex: e0.Index, Scope: kernel.ScopeLink}))
	must(t, pod.RouteReplace(kernel.Route{Gw: net.ParseIP("169.254.1.1"), LinkIndex: e0.Index, Family: kernel.FamilyV4}))
	must(t, pod.AddrAdd(e0.Index, cidr("10.0.2.11/32")))
	must(t, pod.NeighSet(kernel.Neigh{LinkIndex: e0.Index, IP: net.ParseIP("169.254.1.1"), HardwareAddr: hostMAC, State: kernel.NeighStatePermanent}))
	must(t, node.RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: cidr("10.0.2.11/32"), LinkIndex: hv.Index, Scope: kernel.ScopeLink}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 2}))
	must(t, node.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Dst: cidr("2600:1f14::5/128"), Table: kernel.TableMain}))
	stage("pod up")
	must(t, pod.LinkDel("eth0"))
	stage("pod veth deleted")
}

// TestModelMatchesKernel runs the same sequence on the model and on the
// real kernel and compares the normalised dumps of both namespaces.
func TestModelMatchesKernel(t *testing.T) {
	rn, rp := realPair(t)
	k := model.New()
	must(t, k.AddNamespace("node"))
	must(t, k.AddNamespace("pod"))
	mn, _ := k.Open("node")
	mp, _ := k.Open("pod")
	var realDumps, modelDumps [][]string
	dump := func(out *[][]string, n, p kernel.API) func(string) {
		return func(stage string) {
			for _, h := range []kernel.API{n, p} {
				st, err := kernel.Snapshot(h)
				must(t, err)
				*out = append(*out, append([]string{"== " + stage}, st.Lines()...))
			}
		}
	}
	sequence(t, rn, rp, dump(&realDumps, rn, rp))
	sequence(t, mn, mp, dump(&modelDumps, mn, mp))
	compared := 0
	for i := range realDumps {
		r, m := strings.Join(realDumps[i], "\n"), strings.Join(modelDumps[i], "\n")
		if r != m {
			t.Errorf("dump %d differs\nreal kernel:\n%s\nmodel:\n%s", i, r, m)
		}
		compared += len(realDumps[i]) - 1
	}
	t.Logf("compared %d dump lines over %d snapshots", compared, len(realDumps))
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// TestErrorClasses: the kernel's errnos, which the model returns too.
func TestErrorClasses(t *testing.T) {
	rn, rp := realPair(t)
	k := model.New()
	k.AddNamespace("node")
	k.AddNamespace("pod")
	mn, _ := k.Open("node")
	mp, _ := k.Open("pod")
	for _, side := range []struct {
		name      string
		node, pod kernel.API
	}{{"real", rn, rp}, {"model", mn, mp}} {
		n, p := side.node, side.pod
		got := map[string]syscall.Errno{}
		got["long name"] = errnoOf(n.AddBridge("sixteen-chars-xx", 0))
		must(t, n.AddBridge("br0", 0))
		got["duplicate link"] = errnoOf(n.AddBridge("br0", 0))
		_, err := n.LinkByName("nope")
		got["missing link"] = errnoOf(err)
		r := kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.0.5/32"), Table: kernel.TableMain}
		must(t, n.RuleAdd(r))
		got["duplicate rule"] = errnoOf(n.RuleAdd(r))
		must(t, n.RuleDel(r))
		got["missing rule"] = errnoOf(n.RuleDel(r))
		got["missing route"] = errnoOf(n.RouteDel(kernel.Route{Dst: cidr("10.9.0.0/16")}))
		got["route on missing link"] = errnoOf(n.RouteAdd(kernel.Route{Dst: cidr("10.9.0.0/16"), LinkIndex: 4242}))
		must(t, p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "hv0", PeerNamespace: n}))
		got["sysctl of missing link"] = errnoOf(n.SysctlSet("net/ipv6/conf/nope/accept_ra", "0"))
		want := map[string]syscall.Errno{"long name": syscall.ERANGE, "duplicate link": syscall.EEXIST, "missing link": syscall.ENODEV,
			"duplicate rule": syscall.EEXIST, "missing rule": syscall.ENOENT, "missing route": syscall.ESRCH,
			"route on missing link": syscall.ENODEV, "sysctl of missing link": syscall.ENOENT}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s = %v (%d), want %v", side.name, k, got[k], got[k], w)
			}
		}
	}
}

// TestRealRulesSurviveDevice: on Linux, deleting a veth takes its routes
// and keeps the rules — the asymmetry every leak comes from.
func TestRealRulesSurviveDevice(t *testing.T) {
	n, p := realPair(t)
	must(t, p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "hv0", PeerNamespace: n}))
	must(t, n.LinkSetUp("hv0"))
	hv, err := n.LinkByName("hv0")
	must(t, err)
	e0, err := p.LinkByName("eth0")
	must(t, err)
	if hv.ParentIndex != e0.Index || e0.ParentIndex != hv.Index {
		t.Fatalf("veth peers: %+v %+v", hv, e0)
	}
	must(t, n.RouteAdd(kernel.Route{Dst: cidr("10.0.1.11/32"), LinkIndex: hv.Index, Scope: kernel.ScopeLink}))
	must(t, n.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.1.11/32"), Table: kernel.TableMain}))
	must(t, n.SysctlSet("net/ipv4/ip_forward", "1"))
	if v, err := n.SysctlGet("net/ipv4/ip_forward"); err != nil || v != "1" {
		t.Fatalf("sysctl: %q %v", v, err)
	}
	res, err := n.RouteGet(kernel.RouteQuery{Dst: net.ParseIP("10.0.1.11")})
	must(t, err)
	if res.LinkName != "hv0" {
		t.Fatalf("route get: %+v", res)
	}
	must(t, p.LinkDel("eth0"))
	if _, err := n.LinkByName("hv0"); !kernel.IsNotFound(err) {
		t.Fatalf("peer survived: %v", err)
	}
	routes, _ := n.RouteList(kernel.FamilyV4, kernel.TableMain)
	for _, r := range routes {
		if r.Dst != nil && r.Dst.String() == "10.0.1.11/32" {
			t.Fatal("route survived its device")
		}
	}
	rules, _ := n.RuleList(kernel.FamilyV4)
	found := false
	for _, r := range rules {
		found = found || (r.Priority == 512 && r.Dst != nil && r.Dst.String() == "10.0.1.11/32")
	}
	if !found {
		t.Fatal("rule did not survive its device (Linux keeps it)")
	}
}

func TestOpenMissingNamespace(t *testing.T) {
	testns.Require(t)
	if _, err := (Opener{}).Open("/var/run/netns/vpccni-does-not-exist"); !errors.Is(err, kernel.ErrNamespaceGone) {
		t.Fatalf("err = %v", err)
	}
}
