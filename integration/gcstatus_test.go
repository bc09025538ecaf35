package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/ownership"
)

// list11 is the node's network at CNI 1.1.0, the version with GC and STATUS.
func (n *node) list11() *libcni.NetworkConfigList {
	l, err := netConfList(n.conf11("aws-cni"))
	Expect(err).NotTo(HaveOccurred())
	return l
}

var _ = Describe("CNI 1.1 GC and STATUS through libcni", Label("ipv4", "real-kernel", "cni-1.1"), func() {
	It("collects the attachments the runtime no longer has and leaves the valid ones", func() {
		n := newNode("t3.medium")
		l := n.list11()
		keep, stale := n.newPod("web-0"), n.newPod("web-1")
		var keepIP, staleIP = podAddr(n.add(keep)), podAddr(n.add(stale))
		// web-1's sandbox vanished without a DEL (a runtime crash): its
		// namespace goes, and with it the veth pair and its route; its
		// rules stay, ipamd still holds its address. The veth is deleted
		// by hand first: the kernel frees a closed namespace (and its
		// links) whenever it gets to it, so deleting it after the Close
		// raced that and sometimes found no such device.
		Expect(n.Host.LinkDel(ownership.HostVeth("eni", stale.ns, stale.name))).To(Succeed())
		Expect(stale.netns.Close()).To(Succeed())
		// The runtime lost its record of it too (libcni would otherwise DEL
		// the cached attachment itself before asking the plugin): only the
		// plugin's GC, through ipamd's allocations, can find it.
		Expect(os.Remove(filepath.Join(n.Dir, "cache", "results", "aws-cni-"+stale.containerID+"-eth0"))).To(Succeed())
		Expect(n.rulesFor(staleIP)).NotTo(BeEmpty())

		Expect(n.NS.Do(func() error {
			return n.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{
				{ContainerID: keep.containerID, IfName: "eth0"}}})
		})).To(Succeed())
		Expect(n.rulesFor(staleIP)).To(BeEmpty(), "the stale attachment's rules")
		Expect(n.routesFor(staleIP)).To(BeEmpty(), "the stale attachment's routes")
		Expect(n.allocations()).To(ConsistOf(WithTransform(func(a allocation) string { return a.IP }, Equal(keepIP.String()))))
		Expect(n.rulesFor(keepIP)).To(HaveLen(1), "the valid pod's rule 512 stays")
		Expect(n.check(keep)).To(Succeed(), "the valid pod is intact")
	})

	It("reports ready only while ipamd answers and has an address to give", func() {
		n := newNode("t3.medium") // 5 pod addresses on device 0, 5 on device 1
		l := n.list11()
		status := func() error {
			return n.NS.Do(func() error { return n.cni.GetStatusNetworkList(context.Background(), l) })
		}
		Expect(status()).To(Succeed())

		n.killIpamd()
		err := status()
		var ce *types.Error
		Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
		Expect(ce.Code).To(Equal(types.ErrPluginNotAvailable))
		Expect(ce.Msg).To(ContainSubstring("ipamd"))

		n.startIpamd("t3.medium", "--ip-cooldown", "0s", "--reconcile=false")
		for i := range 15 { // a t3.medium's whole pool
			n.add(n.newPod(fmt.Sprintf("fill-%d", i)))
		}
		err = status()
		Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
		Expect(ce.Code).To(Equal(types.ErrPluginNotAvailable))
		Expect(ce.Msg).To(ContainSubstring("no address to give"))
	})
})
