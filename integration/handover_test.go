package integration

import (
	"context"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/ownership"
)

var _ = Describe("a DEL hands the pod's veth pair to ipamd", Label("ipv4", "real-kernel", "handover"), func() {
	It("removes what routes the pod at once, and ipamd releases the address only once the veth is gone", func() {
		n := newNode("t3.medium", "--ip-cooldown", "0s")
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)

		// The DEL alone, without the wait n.del adds.
		Expect(n.NS.Do(func() error { return n.cni.DelNetworkList(context.Background(), n.list, p.rt) })).To(Succeed())
		Expect(n.rulesFor(ip)).To(BeEmpty(), "rules 512/1536 are the DEL's, gone when it returns")
		Expect(n.routesFor(ip)).To(BeEmpty(), "the host route is the DEL's, gone when it returns")

		By("sampling ipamd, then the kernel, until both are done: never an address free with its veth there")
		// ipamd first: an address free at that moment had its veth
		// deleted before, so a veth seen after it cannot be the pod's.
		deadline := time.Now().Add(10 * time.Second)
		samples := 0
		for {
			held := slices.Contains(allocatedIPs(n), ip.String())
			_, err := n.Host.LinkByName(hostVeth)
			vethThere := err == nil
			samples++
			Expect(vethThere && !held).To(BeFalse(), "sample %d: ipamd released %s while %s exists", samples, ip, hostVeth)
			if !vethThere && !held {
				break
			}
			Expect(time.Now().Before(deadline)).To(BeTrue(), "ipamd did not delete %s and release %s within 10s", hostVeth, ip)
			time.Sleep(time.Millisecond)
		}
		AddReportEntry("samples until ipamd was done", samples)
		expectGone(n, p, ip, hostVeth)
		Expect(n.metrics()).To(ContainSubstring(`vpccni_del_ip_requests_total{reason="PodDeleted",result="handed-over"} 1`))
	})
})
