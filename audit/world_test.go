package audit

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
)

// world is a model node as ipamd leaves it: eth0 (10.0.1.0/24, main),
// eth1 (10.0.2.0/24, table 2) and eth2 (also 10.0.2.0/24, table 3: ENIs
// often share a subnet), each secondary ENI with its rule 32765 and its
// table's routes, IPv4 forwarding on; and the pods, sandboxes, ipamd
// memory and leftovers a test puts on it.
type world struct {
	t         *testing.T
	h         kernel.API
	allocs    []checkpoint.Allocation
	sandboxes []Sandbox
	ipamd     *IpamdView
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
	w := &world{t: t, h: h}
	for _, key := range []string{"net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding"} {
		w.must(h.SysctlSet(key, "1"))
	}
	w.must(testns.PlugENIs(h))
	w.must(h.AddVeth(kernel.VethSpec{Name: "eth2", PeerName: "vpc2", MTU: 9001}))
	w.must(h.LinkSetUp("eth2"))
	w.must(h.LinkSetUp("vpc2"))
	for dev, table := range map[string]int{"eth1": 2, "eth2": 3} {
		l, err := h.LinkByName(dev)
		w.must(err)
		primary := fmt.Sprintf("10.0.2.%d", 10*(table-1))
		if dev == "eth2" {
			w.must(h.AddrAdd(l.Index, testns.IfAddr(primary+"/24")))
		}
		w.must(h.RuleAdd(kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: testns.IfAddr(primary + "/32"), Table: table}))
		w.must(h.RouteAdd(kernel.Route{Table: table, Dst: testns.IfAddr("10.0.2.0/24"), LinkIndex: l.Index, Scope: kernel.ScopeLink}))
		w.must(h.RouteAdd(kernel.Route{Table: table, Gw: net.ParseIP("10.0.2.1"), LinkIndex: l.Index, Family: kernel.FamilyV4}))
	}
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func veth(pod string) string { return ownership.HostVeth("eni", "default", pod) }

// pod gives name's veth the address: the host veth, its host route, rule
// 512 (unless noRule) and, on a table other than main, rule 1536.
func (w *world) pod(name, addr string, table int, noRule bool) {
	ip := netip.MustParseAddr(addr)
	w.must(w.h.AddVeth(kernel.VethSpec{Name: veth(name), PeerName: "p" + name, MTU: 9001}))
	l, err := w.h.LinkByName(veth(name))
	w.must(err)
	w.must(w.h.LinkSetUp(veth(name)))
	w.must(w.h.RouteAdd(kernel.Route{Dst: ownership.IPNet(ownership.HostPrefix(ip)), LinkIndex: l.Index, Scope: kernel.ScopeLink}))
	if !noRule {
		w.must(w.h.RuleAdd(ownership.ToPodRule(ip)))
	}
	if table != kernel.TableMain {
		w.must(w.h.RuleAdd(ownership.FromPodRule(ip, table)))
	}
}

// allocate records the pod's address in the checkpoint.
func (w *world) allocate(pod, addr string) {
	w.allocs = append(w.allocs, checkpoint.Allocation{NetworkName: "aws-cni", ContainerID: "c-" + pod, IfName: "eth0", IPv4: addr,
		Metadata: checkpoint.Metadata{K8SPodNamespace: "default", K8SPodName: pod}})
}

// sandbox lists the pod's sandbox in the runtime (ID "c-<pod>").
func (w *world) sandbox(pod string, ready bool) {
	w.sandboxes = append(w.sandboxes, Sandbox{ID: "c-" + pod, Namespace: "default", Name: pod, Ready: ready})
}

// holds puts the pod's address in ipamd's memory, on table.
func (w *world) holds(pod, addr string, table int) {
	if w.ipamd == nil {
		w.ipamd = &IpamdView{Held: map[netip.Addr]Holder{}}
	}
	w.ipamd.Held[netip.MustParseAddr(addr)] = Holder{ContainerID: "c-" + pod, PodNamespace: "default", PodName: pod, Table: table}
}

// live is a healthy pod: its objects, its allocation, its sandbox when the
// test lists sandboxes, ipamd's word when the test asks ipamd.
func (w *world) live(name, addr string, table int) {
	w.pod(name, addr, table, false)
	w.allocate(name, addr)
	if w.sandboxes != nil {
		w.sandbox(name, true)
	}
	if w.ipamd != nil {
		w.holds(name, addr, table)
	}
}

// foreign puts other agents' rules at the pod priorities: an address in
// no ENI subnet at 512, a 1536 rule into a table that is no ENI's, and
// rule 10 on the node's own link.
func (w *world) foreign() {
	w.must(w.h.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: testns.IfAddr("192.168.7.7/32"), Table: kernel.TableMain}))
	w.must(w.h.RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: testns.IfAddr("10.0.1.50/32"), Table: 100}))
	w.must(w.h.RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "eth0", Table: 50}))
}

func (w *world) input() Input {
	return Input{Node: w.h, Allocations: w.allocs, VethPrefixes: []string{"eni"}, Sandboxes: w.sandboxes, Ipamd: w.ipamd}
}

func (w *world) run() []Finding {
	w.t.Helper()
	fs, err := Run(w.input())
	w.must(err)
	return fs
}

// audit is the findings as "CLASS object" lines, fixable ones marked.
func (w *world) audit() []string {
	w.t.Helper()
	var out []string
	for _, f := range w.run() {
		line := string(f.Class) + " " + f.Object
		if f.Fixable {
			line += " [fix]"
		}
		out = append(out, line)
	}
	return out
}

func (w *world) expect(want ...string) {
	w.t.Helper()
	if got := w.audit(); !slices.Equal(got, want) {
		w.t.Fatalf("findings\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func (w *world) rules() []string {
	rs, err := w.h.RuleList(kernel.FamilyAll)
	w.must(err)
	var out []string
	for _, r := range rs {
		out = append(out, kernel.RuleString(r))
	}
	return out
}

func asShadowed(err error, se **ownership.ShadowedRuleError) bool { return errors.As(err, se) }
