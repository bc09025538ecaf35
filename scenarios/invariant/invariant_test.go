package invariant

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/plugin/driver"
)

// fixture: a node with eth0/eth1 and their tables, and one live pod on
// device 1 built by the real driver. Each test breaks one thing and
// expects exactly the check that covers it to fire.
type fixture struct {
	k    *model.Kernel
	node kernel.API
	pod  Pod
	w    World
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ipn(s string) *net.IPNet {
	ip, n, _ := net.ParseCIDR(s)
	n.IP = ip
	if ones, bits := n.Mask.Size(); ones == bits {
		n.IP = ip.Mask(n.Mask)
	}
	return n
}

func setup(t *testing.T) *fixture {
	k := model.New()
	must(t, k.AddNamespace("node"))
	must(t, k.AddNamespace("pod"))
	node, _ := k.Open("node")
	podH, _ := k.Open("pod")
	must(t, node.SysctlSet("net/ipv4/ip_forward", "1")) // a node routes its pods' traffic
	for d, a := range []string{"10.0.1.10/24", "10.0.2.10/24"} {
		idx, err := k.AddDevice("node", []string{"eth0", "eth1"}[d], 9001, nil)
		must(t, err)
		must(t, node.LinkSetUp([]string{"eth0", "eth1"}[d]))
		must(t, node.AddrAdd(idx, ipn(a)))
	}
	eth0, _ := node.LinkByName("eth0")
	eth1, _ := node.LinkByName("eth1")
	must(t, node.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: eth0.Index}))
	must(t, node.RouteAdd(kernel.Route{Table: 2, Gw: net.ParseIP("10.0.2.1"), LinkIndex: eth1.Index}))
	p := Pod{Name: "default/web-1", ContainerID: "c1", IP: netip.MustParseAddr("10.0.2.11"), Device: 1, HostVeth: "eniweb1", Netns: "pod"}
	must(t, driver.New(nil).Setup(node, podH, driver.Pod{HostVeth: p.HostVeth, ContainerIf: "eth0", MTU: 9001,
		IPs: []driver.PodIP{{Addr: p.IP, Table: 2}}}))
	f := &fixture{k: k, node: node, pod: p}
	f.w = World{Node: node, Live: []Pod{p}, Remote: map[netip.Addr]string{}, NamespaceExists: k.HasNamespace,
		ENILink: func(d int) string { return []string{"eth0", "eth1"}[d] }, IpamdUp: true,
		Allocations: []Allocation{{ContainerID: "c1", IP: p.IP}}, OffVPC: []netip.Addr{netip.MustParseAddr("198.51.100.7")}}
	return f
}

func kinds(t *testing.T, w World) (map[string]string, []Violation) {
	t.Helper()
	vs, err := Check(w)
	must(t, err)
	got := map[string]string{}
	for _, v := range vs {
		got[v.Kind] += v.What + "; "
	}
	return got, vs
}

func TestCleanWorldIsClean(t *testing.T) {
	f := setup(t)
	if _, vs := kinds(t, f.w); len(vs) != 0 {
		t.Fatalf("violations on a clean node: %v", vs)
	}
}

func TestEachCheckFires(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, f *fixture)
		kind    string
		what    string
	}{
		{"leaked rule of a deleted pod", func(t *testing.T, f *fixture) {
			must(t, f.node.RuleAdd(kernel.Rule{Priority: 512, Dst: ipn("10.0.1.12/32"), Table: kernel.TableMain}))
			f.w.Deleted = []Pod{{Name: "default/web-0", IP: netip.MustParseAddr("10.0.1.12")}}
		}, Leak, "rule 512 to 10.0.1.12/32 lookup main (default/web-0, deleted)"},
		{"live pod lacks rule 1536", func(t *testing.T, f *fixture) {
			must(t, f.node.RuleDel(kernel.Rule{Priority: 1536, Src: ipn("10.0.2.11/32"), Table: 2}))
		}, Broken, "lacks rule 1536 lookup 2"},
		{"traffic off the node leaves by the wrong ENI", func(t *testing.T, f *fixture) {
			f.w.Remote[netip.MustParseAddr("10.0.1.99")] = "default/api-0"
			must(t, f.node.RuleAdd(kernel.Rule{Priority: 512, Dst: ipn("10.0.1.99/32"), Table: kernel.TableMain}))
		}, Misroute, "leaves via eth0, not eth1"},
		{"traffic to a live pod goes elsewhere", func(t *testing.T, f *fixture) {
			eth0, _ := f.node.LinkByName("eth0")
			must(t, f.node.RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: ipn("10.0.2.11/32"), LinkIndex: eth0.Index, Scope: kernel.ScopeLink}))
		}, Misroute, "traffic to default/web-1 (10.0.2.11) goes to eth0, not eniweb1"},
		{"ipamd forgot a live pod", func(t *testing.T, f *fixture) { f.w.Allocations = nil }, IPAM, "no allocation for live pod"},
		{"ipamd holds a gone sandbox's address", func(t *testing.T, f *fixture) {
			f.w.Allocations = append(f.w.Allocations, Allocation{ContainerID: "gone", IP: netip.MustParseAddr("10.0.1.13")})
		}, IPAM, "for gone sandbox gone"},
		{"an address on two nodes", func(t *testing.T, f *fixture) {
			f.w.Remote[f.pod.IP] = "default/api-0"
		}, DoubleAssign, "10.0.2.11 held by"},
		{"a deleted pod's namespace remains", func(t *testing.T, f *fixture) {
			must(t, f.k.AddNamespace("pod-old"))
			f.w.Deleted = []Pod{{Name: "default/old", Netns: "pod-old"}}
		}, Stuck, "pod-old still exists"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			c.breakIt(t, f)
			got, vs := kinds(t, f.w)
			if !strings.Contains(got[c.kind], c.what) {
				t.Fatalf("want %s containing %q, got %v", c.kind, c.what, vs)
			}
		})
	}
}

// TestCheckStepFires: the step invariants see an address held by two pods
// and one released with objects of it left, and nothing else: an address
// a live pod holds again, a foreign rule of the same shape, and a clean
// step are not findings.
func TestCheckStepFires(t *testing.T) {
	f := setup(t)
	vs, err := CheckStep(f.w, nil, nil)
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("a clean step: %v", vs)
	}
	// The live pod's address released under it: its rules are its.
	vs, err = CheckStep(f.w, []netip.Addr{f.pod.IP}, nil)
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("an address a live pod holds again: %v", vs)
	}
	// The pod is gone, its objects are not, and ipamd released it.
	w := f.w
	w.Live, w.Deleted = nil, []Pod{f.pod}
	vs, err = CheckStep(w, []netip.Addr{f.pod.IP}, nil)
	must(t, err)
	if len(vs) != 1 || vs[0].Kind != EarlyRelease || !strings.Contains(vs[0].What, "rule 1536: from 10.0.2.11 lookup 2") ||
		!strings.Contains(vs[0].What, "route 10.0.2.11/32") {
		t.Fatalf("early release: %v", vs)
	}
	// A foreign rule of that shape alone is not the pod's.
	foreign := kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ipn("10.0.2.99/32"), Table: kernel.TableMain}
	must(t, f.node.RuleAdd(foreign))
	w.Foreign = []kernel.Rule{foreign}
	vs, err = CheckStep(w, []netip.Addr{netip.MustParseAddr("10.0.2.99")}, nil)
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("a foreign rule: %v", vs)
	}
	// Two live pods on one address.
	w = f.w
	w.Live = append(w.Live, Pod{Name: "default/web-2", ContainerID: "c2", IP: f.pod.IP})
	vs, err = CheckStep(w, nil, nil)
	must(t, err)
	if len(vs) != 1 || vs[0].Kind != DoubleAssign {
		t.Fatalf("double assignment: %v", vs)
	}
}

// TestCheckStepHandedVeth: an address whose DEL handed its veth pair to
// ipamd, released while that veth is still on the node, is an early
// release, even with the rules and the route gone; with no hand-over (the
// reference's flow leaves its veth to the runtime) it is not.
func TestCheckStepHandedVeth(t *testing.T) {
	f := setup(t)
	rules, err := f.node.RuleList(kernel.FamilyAll)
	must(t, err)
	for _, r := range rules {
		if (r.Dst != nil && r.Dst.IP.Equal(f.pod.IP.AsSlice())) || (r.Src != nil && r.Src.IP.Equal(f.pod.IP.AsSlice())) {
			must(t, f.node.RuleDel(r))
		}
	}
	routes, err := f.node.RouteList(kernel.FamilyAll, kernel.TableMain)
	must(t, err)
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.Equal(f.pod.IP.AsSlice()) {
			must(t, f.node.RouteDel(r))
		}
	}
	veth, err := f.node.LinkByName(f.pod.HostVeth)
	must(t, err)
	w := f.w
	w.Live, w.Deleted = nil, []Pod{f.pod}
	vs, err := CheckStep(w, []netip.Addr{f.pod.IP}, nil)
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("no hand-over, rules and route gone: %v", vs)
	}
	vs, err = CheckStep(w, []netip.Addr{f.pod.IP}, map[netip.Addr]int{f.pod.IP: veth.Index})
	must(t, err)
	if len(vs) != 1 || vs[0].Kind != EarlyRelease || !strings.Contains(vs[0].What, "link "+f.pod.HostVeth) {
		t.Fatalf("released with its handed-over veth there: %v", vs)
	}
	must(t, f.node.LinkDel(f.pod.HostVeth))
	vs, err = CheckStep(w, []netip.Addr{f.pod.IP}, map[netip.Addr]int{f.pod.IP: veth.Index})
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("released once its handed-over veth is gone: %v", vs)
	}
}
