package integration

import (
	"errors"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/plugin/driver"
)

// The driver's rule deletion against Linux's delete semantics: a delete
// request treats the selectors it leaves unset as wildcards and removes
// the first rule, in list order, that has the ones it sets. These specs
// run the driver itself on handles bound to namespaces of their own.

// shadowScene is a node and a pod namespace with one regular pod on
// table 2 whose rules come after the given foreign ones.
type shadowScene struct {
	nodeNS    *testns.NS
	host, pod kernel.API
	p         driver.Pod
}

var shadowIP = netip.MustParseAddr("10.0.2.11")

func newShadowScene(foreign ...kernel.Rule) *shadowScene {
	s := &shadowScene{}
	var err error
	s.nodeNS, err = testns.New("vpccni-shnode")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { s.nodeNS.Close() })
	podNS, err := testns.New("vpccni-shpod")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { podNS.Close() })
	s.host, s.pod = openNS(s.nodeNS.Path()), openNS(podNS.Path())
	// The node's ENIs, eth1's rule 32765 as ipamd would add it: 10.0.2.11
	// is an address of eth1's subnet, its pods use table 2.
	plugENIs(s.host)
	Expect(s.host.RuleAdd(kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: ifAddr("10.0.2.10/32"), Table: 2})).To(Succeed())
	for _, r := range foreign {
		Expect(s.host.RuleAdd(r)).To(Succeed(), "foreign %s", kernel.RuleString(r))
	}
	s.p = driver.Pod{HostVeth: "eni0761ccbeace", ContainerIf: "eth0", MTU: 9001, MACSeed: "c1",
		IPs: []driver.PodIP{{Addr: shadowIP, Table: 2}}}
	Expect(driver.New(nil).Setup(s.host, s.pod, s.p)).To(Succeed())
	return s
}

func openNS(path string) kernel.API {
	h, err := linux.Opener{}.Open(path)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { h.Close() })
	return h
}

func (s *shadowScene) rules() []string {
	st, err := kernel.Snapshot(s.host)
	Expect(err).NotTo(HaveOccurred())
	return st.Rules
}

var (
	pod512  = "rule 512: from all to 10.0.2.11 lookup main"
	pod1536 = "rule 1536: from 10.0.2.11 lookup 2"
	iif512  = kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: &net.IPNet{IP: shadowIP.AsSlice(), Mask: net.CIDRMask(32, 32)},
		IifName: "eth0", Table: kernel.TableMain}
)

var _ = Describe("the driver's rule deletion on Linux", Label("hostile", "real-kernel"), func() {
	It("is right to worry: the pod rule's delete request removes a foreign iif rule listed before it", func() {
		s := newShadowScene(iif512)
		before := s.rules()
		Expect(s.host.RuleDel(kernel.Rule{Priority: 512, Dst: iif512.Dst, Table: kernel.TableMain})).To(Succeed())
		Expect(kernel.Minus(before, s.rules())).To(Equal([]string{kernel.RuleString(iif512)}))
	})

	DescribeTable("leaves the pod's rule in place, says which foreign rule is in the way, and never removes it",
		func(foreign kernel.Rule, kept, gone string) {
			s := newShadowScene(foreign)
			_, err := driver.New(nil).Teardown(s.host, s.pod, s.p)
			Expect(s.rules()).To(ContainElements(kernel.RuleString(foreign), kept))
			Expect(s.rules()).NotTo(ContainElement(gone), "the unshadowed rule still goes")
			var se *driver.ShadowedRuleError
			Expect(errors.As(err, &se)).To(BeTrue(), "teardown: %v", err)
			Expect(kernel.RuleString(se.Foreign)).To(Equal(kernel.RuleString(foreign)))
			Expect(err.Error()).To(ContainSubstring(kernel.RuleString(foreign)))

			_, lerr := s.pod.LinkByName("eth0")
			Expect(lerr).NotTo(HaveOccurred(), "the pod's interface is kept while the rest is not all gone")

			By("once the foreign rule is gone, a retry (it reads the kept interface) removes the pod's rule, then the interface")
			Expect(s.host.RuleDel(foreign)).To(Succeed())
			_, err = driver.New(nil).Teardown(s.host, s.pod, s.p)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.rules()).NotTo(ContainElement(kept))
			_, lerr = s.pod.LinkByName("eth0")
			Expect(kernel.IsNotFound(lerr)).To(BeTrue(), "the pod's interface (lookup: %v)", lerr)
		},
		Entry("512 with an iif", iif512, pod512, pod1536),
		Entry("512 with an oif", kernel.Rule{Priority: 512, Dst: iif512.Dst, OifName: "eth1", Table: kernel.TableMain}, pod512, pod1536),
		Entry("512 with a fwmark", kernel.Rule{Priority: 512, Dst: iif512.Dst, Mark: 0x80, Mask: 0x80, Table: kernel.TableMain}, pod512, pod1536),
		Entry("1536 with an iif", kernel.Rule{Priority: 1536, Src: iif512.Dst, IifName: "eth1", Table: 2}, pod1536, pod512),
	)

	It("deletes the pod's rule when the foreign one comes after it (the kernel meets the pod's first)", func() {
		s := newShadowScene()
		Expect(s.host.RuleAdd(iif512)).To(Succeed())
		_, err := driver.New(nil).Teardown(s.host, s.pod, s.p)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.rules()).To(ContainElement(kernel.RuleString(iif512)))
		Expect(s.rules()).NotTo(ContainElements(pod512, pod1536))
	})

	It("refuses two rules that read the same: one has a selector kernel.Rule cannot show (ipproto)", func() {
		s := newShadowScene()
		// `512: to 10.0.2.11 ipproto tcp lookup main`, added through
		// netlink directly (kernel.Rule has no ipproto), before the pod's.
		ns, err := netns.GetFromPath(s.nodeNS.Path())
		Expect(err).NotTo(HaveOccurred())
		defer ns.Close()
		nl, err := netlink.NewHandleAt(ns)
		Expect(err).NotTo(HaveOccurred())
		defer nl.Close()
		own := kernel.Rule{Priority: 512, Dst: iif512.Dst, Table: kernel.TableMain}
		Expect(s.host.RuleDel(own)).To(Succeed())
		tcp := netlink.NewRule()
		tcp.Priority, tcp.Family, tcp.Dst, tcp.Table, tcp.IPProto = 512, netlink.FAMILY_V4, iif512.Dst, kernel.TableMain, 6
		Expect(nl.RuleAdd(tcp)).To(Succeed())
		Expect(s.host.RuleAdd(own)).To(Succeed())
		Expect(kernel.Minus(s.rules(), []string{pod512})).To(ContainElement(pod512), "kernel.Rule shows the tcp rule as a plain one")

		_, err = driver.New(nil).Teardown(s.host, s.pod, s.p)
		var se *driver.ShadowedRuleError
		Expect(errors.As(err, &se)).To(BeTrue(), "teardown: %v", err)
		all, err := nl.RuleList(netlink.FAMILY_V4)
		Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, r := range all {
			if r.Priority == 512 && r.Dst != nil && r.Dst.IP.Equal(shadowIP.AsSlice()) {
				n++
			}
		}
		Expect(n).To(Equal(2), "both look-alikes are still there")
	})
})
