package audit

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/testns"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
)

// world is a model node with its two ENIs as ipamd leaves them (eth1's
// rule 32765 to table 2), and the pods and leftovers a test puts on it.
type world struct {
	t      *testing.T
	h      kernel.API
	allocs []checkpoint.Allocation
}

func newWorld(t *testing.T) *world {
	k := model.New()
	if err := k.AddNamespace("node"); err != nil {
		t.Fatal(err)
	}
	h, err := k.Open("node")
	if err != nil {
		t.Fatal(err)
	}
	if err := testns.PlugENIs(h); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, h: h}
	w.must(h.RuleAdd(kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: testns.IfAddr("10.0.2.10/32"), Table: 2}))
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// pod gives name's veth the address: the host veth, its host route, rule
// 512 (unless noRule) and, in table 2, rule 1536.
func (w *world) pod(name, addr string, noRule bool) {
	ip := netip.MustParseAddr(addr)
	veth := ownership.HostVeth("eni", "default", name)
	w.must(w.h.AddVeth(kernel.VethSpec{Name: veth, PeerName: "p" + name, MTU: 9001}))
	l, err := w.h.LinkByName(veth)
	w.must(err)
	w.must(w.h.LinkSetUp(veth))
	w.must(w.h.RouteAdd(kernel.Route{Dst: ownership.IPNet(ownership.HostPrefix(ip)), LinkIndex: l.Index, Scope: kernel.ScopeLink}))
	if !noRule {
		w.must(w.h.RuleAdd(ownership.ToPodRule(ip)))
	}
	if netip.MustParsePrefix("10.0.2.0/24").Contains(ip) {
		w.must(w.h.RuleAdd(ownership.FromPodRule(ip, 2)))
	}
}

func (w *world) allocate(pod, addr string) {
	w.allocs = append(w.allocs, checkpoint.Allocation{NetworkName: "aws-cni", ContainerID: "c-" + pod, IfName: "eth0", IPv4: addr,
		Metadata: checkpoint.Metadata{K8SPodNamespace: "default", K8SPodName: pod}})
}

func (w *world) audit() []string {
	w.t.Helper()
	fs, err := Run(Input{Node: w.h, Allocations: w.allocs, VethPrefixes: []string{"eni"}})
	w.must(err)
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Class)+" "+f.Object)
	}
	return out
}

// TestHealthyNodeIsClean: live, allocated pods on both ENIs and other
// agents' rules at the pod priorities give no finding.
func TestHealthyNodeIsClean(t *testing.T) {
	w := newWorld(t)
	w.pod("web-0", "10.0.1.11", false)
	w.allocate("web-0", "10.0.1.11")
	w.pod("web-5", "10.0.2.11", false)
	w.allocate("web-5", "10.0.2.11")
	foreign(w)
	if got := w.audit(); len(got) != 0 {
		t.Fatalf("findings on a healthy node: %v", got)
	}
}

// foreign puts other agents' rules at the pod priorities: an address in
// no ENI subnet at 512, and a 1536 rule into a table that is no ENI's.
func foreign(w *world) {
	w.must(w.h.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: testns.IfAddr("192.168.7.7/32"), Table: kernel.TableMain}))
	w.must(w.h.RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: testns.IfAddr("10.0.1.50/32"), Table: 100}))
}

// TestEachClass: one finding of each class, exactly, beside a healthy
// pod and foreign rules.
func TestEachClass(t *testing.T) {
	w := newWorld(t)
	w.pod("web-0", "10.0.1.11", false)
	w.allocate("web-0", "10.0.1.11")
	foreign(w)
	// #2048: web-5's DEL never tore it down, its veth went with its
	// namespace, ipamd forgot it.
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.2.11"))))
	w.must(w.h.RuleAdd(ownership.FromPodRule(netip.MustParseAddr("10.0.2.11"), 2)))
	// A checkpoint entry whose pod is gone.
	w.allocate("web-2", "10.0.1.12")
	// web-3's veth is routed an address the checkpoint gives web-9.
	w.pod("web-3", "10.0.1.13", false)
	w.allocate("web-9", "10.0.1.13")
	// web-4 is live and allocated, its rule 512 lost (#3309).
	w.pod("web-4", "10.0.1.14", true)
	w.allocate("web-4", "10.0.1.14")

	got := w.audit()
	want := []string{
		"STRAY ALLOCATION allocation c-web-2 (default/web-2)",
		"DOUBLE route 10.0.1.13 dev " + ownership.HostVeth("eni", "default", "web-3"),
		"MISSING rule 512: from all to 10.0.1.14 lookup main",
		"LEAKED rule 1536: from 10.0.2.11 lookup 2",
		"LEAKED rule 512: from all to 10.0.2.11 lookup main",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("findings\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}
