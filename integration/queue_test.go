package integration

import (
	"net/netip"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/releasequeue"
)

// The release queue on the real binaries: DELs that tore their pods down
// while ipamd was away leave records beside its socket, and the restarted
// ipamd releases them before it serves. The reconciler is off: nothing
// else frees an address here.
var _ = Describe("the release queue", Label("real-kernel", "release-queue"), func() {
	queue := func(n *node) releasequeue.Queue { return releasequeue.Queue{Dir: releasequeue.DirFor(n.Sock)} }

	It("frees every address of a burst of DELs during an eviction before ipamd serves again", func() {
		log := &testns.SyncBuffer{}
		n := newNode("t3.medium", "--reconcile=false")
		var pods []*pod
		var ips []string
		for _, name := range []string{"web-0", "web-1", "web-2", "web-3", "web-4", "web-5"} { // web-5 on device 1
			p := n.newPod(name)
			pods = append(pods, p)
			ips = append(ips, podAddr(n.add(p)).String())
		}
		keep := pods[5]

		By("aws-node is evicted; five DELs tear their pods down and queue their releases")
		n.killIpamd()
		for i, p := range pods[:5] {
			Expect(n.del(p)).To(Succeed())
			expectGone(n, p, netip.MustParseAddr(ips[i]), ownership.HostVeth("eni", p.ns, p.name))
		}
		entries, errs := queue(n).List()
		Expect(errs).To(BeEmpty())
		Expect(entries).To(HaveLen(5))
		for _, e := range entries {
			fi, err := os.Stat(filepath.Join(queue(n).Dir, e.Name))
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		}

		By("aws-node comes back with its checkpoint: the queue is drained before the socket answers")
		n.ipamdOut = log
		n.restartIpamd()
		Expect(allocatedIPs(n)).To(ConsistOf(ips[5]), "only the live pod's address is held, before any AddNetwork")
		Expect(log.String()).To(ContainSubstring(`msg="release queue drained" queue=` + queue(n).Dir + " released=5 stale=0"))
		entries, _ = queue(n).List()
		Expect(entries).To(BeEmpty())
		Expect(n.check(keep)).To(Succeed(), "the live pod is untouched")
	})

	It("never frees a live same-name pod's address for a stale record of its old sandbox", func() {
		n := newNode("t3.medium", "--reconcile=false")
		live := n.sandbox("web-0", "c-new")
		x := podAddr(n.add(live))
		n.killIpamd()

		By("a record of the pod's old sandbox, naming the address the new one holds now")
		stale := releasequeue.Record{Version: releasequeue.Version, NetworkName: "aws-cni", ContainerID: "c-old", IfName: "eth0",
			PodNamespace: "default", PodName: "web-0", HostVethIndex: sandboxVeth(live) + 100,
			IPs: []netip.Addr{x}, TornDownAt: time.Now()}
		Expect(queue(n).Append(stale)).To(Succeed())

		for _, memory := range []string{"kept", "lost"} {
			By("ipamd restarts, checkpoint " + memory)
			if memory == "lost" {
				n.killIpamd()
				Expect(queue(n).Append(stale)).To(Succeed())
				Expect(os.Remove(n.Checkpoint())).To(Succeed())
			}
			n.restartIpamd()
			Expect(allocatedIPs(n)).To(ConsistOf(x.String()), "the live sandbox keeps its address")
			Expect(n.check(live)).To(Succeed())
			entries, _ := queue(n).List()
			Expect(entries).To(BeEmpty(), "the stale record is dropped")
		}
	})
})
