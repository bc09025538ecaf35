package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// The hostile-prevResult corpus (plugin/hostile_test.go runs all of it on
// the kernel model) on the real kernel, for a subset of its cases: the
// real vpc-cni binary, driven by libcni, DELs a pod whose cached result
// (what libcni hands the plugin as prevResult) was tampered with. The node
// holds foreign rules at the pod priorities, listed before the pods' own,
// the default rules, and a live neighbour pod; the node's State before and
// after must differ by exactly what the case legitimately removes.

// hostileNode is a node with five filler pods on eth0 and then the
// neighbour (web-2) and the victim (web-1) on eth1, table 2.
type hostileNode struct {
	*node
	neigh, victim     *pod
	neighIP, victimIP netip.Addr
	victimLines       []string // the node lines the victim's ADD made
}

// hostileForeign: somebody else's rules at the pod priorities. The third
// names the victim's address but table local, which no pod rule uses; a
// delete request of the victim's 512 rule names table main and cannot
// reach it.
func hostileForeign(victim netip.Addr) []kernel.Rule {
	v4, v6 := kernel.FamilyV4, kernel.FamilyV6
	return []kernel.Rule{
		{Priority: 512, Family: v4, Dst: ipnet("10.0.0.0/24"), Table: kernel.TableMain},
		{Priority: 1536, Family: v4, Src: ipnet("192.168.7.7/32"), Table: 2},
		{Priority: 512, Family: v4, Dst: ipnet(victim.String() + "/32"), Table: kernel.TableLocal},
		{Priority: 512, Family: v6, Dst: ipnet("2001:db8::/64"), Table: kernel.TableMain},
		{Priority: 1536, Family: v6, Src: ipnet("2001:db8::7/128"), Table: 2},
	}
}

func ipnet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// newHostileNode builds the node; extra adds more foreign rules (given the
// victim's address). ipamd's reconciler is off so that nothing but the DEL
// changes the node between the two snapshots.
func newHostileNode(extra func(victim netip.Addr) []kernel.Rule) *hostileNode {
	h := &hostileNode{node: newNode("t3.medium", "--reconcile=false")}
	for i := 0; i < 5; i++ {
		h.add(h.newPod(fmt.Sprintf("filler-%c", 'a'+i)))
	}
	h.neigh = h.newPod("web-2")
	h.neighIP = podAddr(h.add(h.neigh))
	h.victim = h.newPod("web-1")
	before := snapshot(h.Host)
	res := h.add(h.victim)
	h.victimIP = podAddr(res)
	h.victimLines = kernel.Minus(snapshot(h.Host), before)
	Expect(res.Interfaces[1].Mac).To(Equal("2"), "the victim is on eth1")
	Expect(h.victimLines).To(HaveLen(4), "host veth, host route, rules 512 and 1536")

	// The foreign rules go before the pods' own at equal priority, as if
	// they had been there first: the pods' rules are taken out (no foreign
	// rule has their selectors yet, so each delete is exact) and put back
	// after them.
	own := append(h.rulesFor(h.neighIP), h.rulesFor(h.victimIP)...)
	for _, r := range own {
		Expect(h.Host.RuleDel(r)).To(Succeed())
	}
	foreign := hostileForeign(h.victimIP)
	if extra != nil {
		foreign = append(foreign, extra(h.victimIP)...)
	}
	for _, r := range foreign {
		Expect(h.Host.RuleAdd(r)).To(Succeed(), "foreign %s", kernel.RuleString(r))
	}
	for _, r := range own {
		Expect(h.Host.RuleAdd(r)).To(Succeed())
	}
	return h
}

// tamper rewrites the victim's result in libcni's cache.
func (h *hostileNode) tamper(craft func(h *hostileNode, prev map[string]any)) {
	path := filepath.Join(h.Dir, "cache", "results", "aws-cni-"+h.victim.containerID+"-eth0")
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var cached map[string]any
	Expect(json.Unmarshal(b, &cached)).To(Succeed())
	prev := cached["result"].(map[string]any)
	craft(h, prev)
	cached["result"] = prev
	b, err = json.Marshal(cached)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, b, 0o600)).To(Succeed())
}

type hostileWant struct {
	code     uint // CNI error code; 0: success
	tornDown bool // the victim's lines go and its eth0 with them
	// kept: the victim's lines that stay anyway.
	kept func(h *hostileNode) []string
	// eth0Kept: the victim's eth0 stays although it is torn down (a
	// teardown that could not finish keeps it for the retry to read).
	eth0Kept bool
}

// delAndCompare runs the DEL through libcni and checks the node, the
// neighbour's namespace and the victim's namespace against want.
func (h *hostileNode) delAndCompare(want hostileWant) error {
	nodeBefore, neighBefore := snapshot(h.Host), h.podState(h.neigh)
	err := h.del(h.victim)
	code := uint(0)
	var ce *types.Error
	if err != nil {
		Expect(errors.As(err, &ce)).To(BeTrue(), "DEL error %v is not a CNI error", err)
		code = ce.Code
		Expect(ce.Msg).NotTo(BeEmpty())
	}
	Expect(code).To(Equal(want.code), "DEL: %v", err)
	var gone []string
	if want.tornDown {
		gone = h.victimLines
		if want.kept != nil {
			gone = kernel.Minus(gone, want.kept(h))
		}
	}
	added, removed := kernel.Minus(snapshot(h.Host), nodeBefore), kernel.Minus(nodeBefore, snapshot(h.Host))
	Expect(added).To(BeEmpty(), "the node gained lines")
	Expect(removed).To(ConsistOf(gone), "the node lost exactly the victim's lines (and no foreign, default or neighbour line)")
	Expect(h.podState(h.neigh)).To(Equal(neighBefore), "the neighbour's namespace changed")
	_, lerr := h.podHandle(h.victim).LinkByName("eth0")
	Expect(kernel.IsNotFound(lerr)).To(Equal(want.tornDown && !want.eth0Kept), "the victim's eth0 (lookup: %v)", lerr)
	return err
}

func (h *hostileNode) podHandle(p *pod) kernel.API {
	k, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { k.Close() })
	return k
}

func (h *hostileNode) podState(p *pod) []string { return snapshot(h.podHandle(p)) }

func itfAt(prev map[string]any, i int) map[string]any {
	l := prev["interfaces"].([]any)
	if i < 0 {
		i += len(l)
	}
	return l[i].(map[string]any)
}

func withIPs(ips ...map[string]any) func(*hostileNode, map[string]any) {
	return func(_ *hostileNode, prev map[string]any) {
		l := make([]any, len(ips))
		for i := range ips {
			l[i] = ips[i]
		}
		prev["ips"] = l
	}
}

func ipAt(i int, addr string) map[string]any { return map[string]any{"interface": i, "address": addr} }

var (
	// hostileRejected: the cached result is set aside (code 7, so that the
	// operator hears of it); the victim is still torn down, from what
	// ipamd's record and its namespace prove, and nothing else is touched.
	// Refusing the DEL outright would leave the pod's network in place for
	// good: libcni hands the same cached result to every retry.
	hostileRejected = hostileWant{code: types.ErrInvalidNetworkConfig, tornDown: true}
	hostileClean    = hostileWant{tornDown: true}
)

var _ = Describe("hostile prevResult on the real kernel", Label("hostile", "real-kernel"), func() {
	DescribeTable("a tampered cached result, DEL through libcni and the vpc-cni binary",
		func(craft func(*hostileNode, map[string]any), want hostileWant) {
			h := newHostileNode(nil)
			h.tamper(craft)
			h.delAndCompare(want)
		},
		Entry("genuine result (control)", func(*hostileNode, map[string]any) {}, hostileClean),
		Entry("dummy mac -5", func(_ *hostileNode, p map[string]any) { itfAt(p, -1)["mac"] = "-5" }, hostileRejected),
		Entry("dummy mac 99999999999", func(_ *hostileNode, p map[string]any) { itfAt(p, -1)["mac"] = "99999999999" }, hostileRejected),
		Entry("dummy sandbox 1e9", func(_ *hostileNode, p map[string]any) { itfAt(p, -1)["sandbox"] = "1e9" }, hostileRejected),
		Entry("container mac 255 (local)", func(_ *hostileNode, p map[string]any) { itfAt(p, 1)["mac"] = "255" }, hostileRejected),
		Entry("container mac 253 (default)", func(_ *hostileNode, p map[string]any) { itfAt(p, 1)["mac"] = "253" }, hostileRejected),
		Entry("ips names interface 7 of 3", withIPs(ipAt(7, "10.0.2.11/32")), hostileRejected),
		Entry("ips 10.0.0.0/8", withIPs(ipAt(1, "10.0.0.0/8")), hostileRejected),
		Entry("65 interfaces", func(_ *hostileNode, p map[string]any) {
			l := p["interfaces"].([]any)
			for len(l) < 65 {
				l = append(l[:len(l)-1], map[string]any{"name": fmt.Sprintf("pad%d", len(l))}, l[len(l)-1])
			}
			p["interfaces"] = l
		}, hostileRejected),
		// libcni cannot parse this cache entry: it drops it and sends DEL
		// without a prevResult, so the plugin asks ipamd, which still has
		// the victim, and tears the victim down from its reply.
		Entry("interfaces not an array (libcni drops the entry)", func(_ *hostileNode, p map[string]any) { p["interfaces"] = "eth0" }, hostileClean),
		// The IPv6 address has no pod rule and no route: nothing of it to
		// remove; the foreign IPv6 rules stay.
		Entry("IPv4 and IPv6 mixed", func(h *hostileNode, p map[string]any) {
			withIPs(ipAt(1, h.victimIP.String()+"/32"), ipAt(1, "2001:db8::11/128"))(h, p)
		}, hostileClean),
		// The neighbour's main route points at the neighbour's veth: its
		// rules are left alone. The victim's go (its eth0 with the
		// namespace handle, its rules from ipamd's reply).
		Entry("ips names the live neighbour's address", func(h *hostileNode, p map[string]any) {
			withIPs(ipAt(1, h.neighIP.String()+"/32"))(h, p)
		}, hostileClean),
	)

	It("leaves a pod rule that a foreign iif rule shadows, names it in the CNI error, and finishes once it is gone", func() {
		var foreign kernel.Rule
		h := newHostileNode(func(v netip.Addr) []kernel.Rule {
			foreign = kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ipnet(v.String() + "/32"), IifName: "eth0", Table: kernel.TableMain}
			return []kernel.Rule{foreign}
		})
		own512 := fmt.Sprintf("rule 512: from all to %s lookup main", h.victimIP)
		// Only rule 1536 goes: the pod's interface, and with it the host
		// veth and route, is the evidence the retry reads, kept until the
		// rest is gone.
		err := h.delAndCompare(hostileWant{code: types.ErrTryAgainLater, tornDown: true, eth0Kept: true,
			kept: func(h *hostileNode) []string {
				return slices.DeleteFunc(slices.Clone(h.victimLines), func(l string) bool { return strings.HasPrefix(l, "rule 1536:") })
			}})
		Expect(err.Error()).To(ContainSubstring(kernel.RuleString(foreign)), "the error names the foreign rule")
		Expect(snapshot(h.Host)).To(ContainElements(kernel.RuleString(foreign), own512))

		By("the operator removes the foreign rule; the runtime's retry finishes")
		Expect(h.Host.RuleDel(foreign)).To(Succeed())
		Expect(h.del(h.victim)).To(Succeed())
		Expect(kernel.Minus(h.victimLines, snapshot(h.Host))).To(ConsistOf(h.victimLines), "the victim's lines are all gone")
		_, lerr := h.podHandle(h.victim).LinkByName("eth0")
		Expect(kernel.IsNotFound(lerr)).To(BeTrue(), "the victim's eth0 (lookup: %v)", lerr)
		Expect(snapshot(h.Host)).To(ContainElement(kernel.RuleString(hostileForeign(h.victimIP)[2])), "the local-table rule stays")
	})
})
