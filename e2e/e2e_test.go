package e2e

import (
	"fmt"
	"net/netip"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
)

var _ = Describe("containerd 1.6 drives vpc-cni through the CRI", Label("containerd"), func() {
	var t timings
	BeforeEach(func() {
		t = timings{}
		DeferCleanup(func() { t.report() })
	})

	It("runs pods' lifecycle in IPv4: runp, stopp, rmp, on the primary and a secondary ENI", func() {
		n := newNode("t3.medium") // 5 pod addresses on device 0, then device 1
		var pods []*sandbox
		for i := 0; i < 6; i++ {
			pods = append(pods, n.runp(t, fmt.Sprintf("web-%d", i)))
		}
		first, last := pods[0], pods[5]
		n.cri.expectOwnBinaries()

		By("a pod on device 0: rule 512 only; a pod on device 1: rules 512 and 1536 (table 2)")
		Expect(netip.MustParsePrefix("10.0.1.0/24").Contains(first.ip)).To(BeTrue(), "first pod %s", first.ip)
		Expect(netip.MustParsePrefix("10.0.2.0/24").Contains(last.ip)).To(BeTrue(), "sixth pod %s", last.ip)
		for _, p := range pods[:5] {
			n.expectUp(p, kernel.TableMain)
		}
		n.expectUp(last, 2)

		By("stopp tears the pods down and ipamd releases their addresses")
		for _, p := range []*sandbox{last, first} {
			n.stopp(t, p)
			n.expectGone(p)
			n.expectReleased(p)
		}
		By("rmp, and the neighbours are untouched")
		for _, p := range []*sandbox{last, first} {
			n.rmp(t, p)
		}
		for _, p := range pods[1:5] {
			n.expectUp(p, kernel.TableMain)
		}
	})

	It("runs a pod's lifecycle in IPv6 (ipamd --ipv6)", Label("ipv6"), func() {
		n := newNode("m5.large", "--ipv6")
		p := n.runp(t, "web-6")
		Expect(p.ip.Is6()).To(BeTrue(), "ipamd --ipv6 gave %s", p.ip)
		n.expectUp(p, kernel.TableMain)
		n.stopp(t, p)
		n.expectGone(p)
		n.expectReleased(p)
		n.rmp(t, p)
	})

	It("tears a pod down after aws-node was evicted, leaks nothing, and reuses the address", Label("incident-2048"), func() {
		// No cooldown: the freed address is the next one handed out.
		newNode("m5.large", "--ip-cooldown", "0s").evictionCycle(t)
	})

	It("answers rmp's second DEL (empty netns, no prevResult) touching nothing of a neighbour", func() {
		n := newNode("m5.large")
		p := n.runp(t, "web-0")
		q := n.runp(t, "web-1")
		Expect(n.cachedResult(p)).To(BeTrue(), "containerd caches the ADD result in the node's libcni cache")
		n.stopp(t, p)
		n.expectGone(p)
		Expect(n.pluginDELs(p)).NotTo(BeEmpty())
		Expect(n.pluginDELs(p)).NotTo(ContainElement(""), "stopp's DEL has the pod's netns")
		Expect(n.cachedResult(p)).To(BeFalse(), "the first DEL took the cached result with it: rmp's DEL has no prevResult")

		node, pod, allocs := n.snapshot(), podSnapshot(q), n.allocations()
		n.rmp(t, p)
		Expect(n.pluginDELs(p)).To(ContainElement(""), "rmp ran the plugin's DEL with an empty netns")

		Expect(n.snapshot()).To(Equal(node), "the node's kernel objects")
		Expect(podSnapshot(q)).To(Equal(pod), "the neighbour's namespace")
		Expect(n.allocations()).To(Equal(allocs), "ipamd's allocations")
		n.expectUp(q, kernel.TableMain)
	})

	It("has portmap chained after vpc-cni map a host port in the node's nat table, and unmap it on stopp", Label("portmap"), func() {
		n := newNode("m5.large")
		p := n.runp(t, "web-0", portMapping{ContainerPort: 80, HostPort: 8080})
		n.expectUp(p, kernel.TableMain)
		nat := n.natRules(false)
		Expect(nat).To(ContainSubstring("-N CNI-HOSTPORT-DNAT"))
		Expect(nat).To(MatchRegexp(`(?m)^-A CNI-DN-\S+ -p tcp .*--dport 8080 -j DNAT --to-destination %s:80$`, p.ip), "nat table:\n%s", nat)

		n.stopp(t, p)
		n.expectGone(p)
		nat = n.natRules(false)
		Expect(nat).NotTo(ContainSubstring(p.ip.String()), "nat table:\n%s", nat)
		Expect(nat).NotTo(ContainSubstring("8080"))
		Expect(strings.Contains(nat, "-N CNI-DN-")).To(BeFalse(), "the pod's DNAT chain is gone:\n%s", nat)
		n.rmp(t, p)
	})
})

// evictionCycle is incident #2048 through the runtime, on a node whose
// ipamd runs with no cooldown: a pod runs, aws-node is evicted (ipamd
// SIGKILLed), stopp's DEL tears the pod down from prevResult without
// ipamd and queues the release, ipamd comes back and releases the address
// before it serves, rmp's DEL finds nothing held, nothing is left, and the
// next sandbox gets the same address.
func (n *node) evictionCycle(t timings) {
	before := n.snapshot()
	p := n.runp(t, "web-0")
	n.expectUp(p, kernel.TableMain)

	By("aws-node is evicted: ipamd is SIGKILLed")
	n.evictIpamd()

	By("stopp: the plugin tears the pod down from prevResult without ipamd")
	n.stopp(t, p)
	n.expectGone(p)

	By("aws-node comes back and releases the address stopp's DEL queued, before it serves")
	n.startIpamd(n.instanceType, n.ipamdArgs...)
	Expect(n.allocations()).To(BeEmpty(), "the queued release is done before ipamd serves (its reconciler leaves young allocations alone)")
	n.rmp(t, p)
	n.expectReleased(p)
	Expect(n.allocations()).To(BeEmpty())
	Expect(n.snapshot()).To(Equal(before), "the node's kernel objects after the pod")

	By("a new sandbox gets the same address")
	q := n.runp(t, "web-1")
	Expect(q.ip).To(Equal(p.ip))
	n.expectUp(q, kernel.TableMain)
}
