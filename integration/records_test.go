package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/attachrec"
	"github.com/vpccni/vpccni/releasequeue"
)

var _ = Describe("the attachment record", Label("ipv4", "real-kernel"), func() {
	It("tears down a pod whose DEL has no prevResult and no netns while ipamd is away without its checkpoint", func() {
		n := newNode("t3.medium") // 5 pod addresses on device 0: the pod goes to eth1, with rule 1536
		for i := 0; i < 5; i++ {
			n.add(n.newPod("filler-" + string(rune('a'+i))))
		}
		p := n.newPod("web-1")
		ip := podAddr(n.add(p))
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)
		hv, err := n.Host.LinkByName(hostVeth)
		Expect(err).NotTo(HaveOccurred())
		store := attachrec.Store{Dir: attachrec.DirFor(n.stateDir)}
		rec, err := store.Load("aws-cni", p.containerID, "eth0")
		Expect(err).NotTo(HaveOccurred(), "ADD wrote no record")
		Expect(rec.IPs).To(Equal([]attachrec.IP{{Addr: ip, Table: 2}}))
		Expect(rec.HostVethIndex).To(Equal(hv.Index))

		By("aws-node is evicted and its checkpoint lost; the sandbox's namespace goes, and with it the veth pair and the host route")
		n.killIpamd()
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		Expect(p.netns.Close()).To(Succeed())
		Eventually(func() bool { _, err := n.Host.LinkByName(hostVeth); return kernel.IsNotFound(err) }, 10*time.Second, 20*time.Millisecond).
			Should(BeTrue(), "the host veth outlived its namespace")
		Expect(n.rulesFor(ip)).To(HaveLen(2), "rules 512 and 1536 outlive the veth")

		By("the runtime's second DEL: no prevResult, an empty netns, ipamd unreachable; only the record names the pod")
		out, code := n.delBare(p)
		Expect(code).To(Equal(0), "DEL printed %s (plugin log %s)", out, n.logFile)
		Expect(n.rulesFor(ip)).To(BeEmpty(), "the record names the pod's rules")
		Expect(n.routesFor(ip)).To(BeEmpty())
		_, err = store.Load("aws-cni", p.containerID, "eth0")
		Expect(err).To(MatchError(attachrec.ErrNotFound), "the record outlived a successful DEL")
		queued, errs := releasequeue.Queue{Dir: releasequeue.DirFor(n.Sock)}.List()
		Expect(errs).To(BeEmpty())
		Expect(queued).To(HaveLen(1))
		Expect(queued[0].Record.IPs).To(ConsistOf(ip))
		Expect(queued[0].Record.HostVethIndex).To(Equal(hv.Index), "the record's ifindex is the sandbox's proof for ipamd")

		By("aws-node comes back without its checkpoint: the address is free, nothing of the pod is left")
		n.restartIpamd()
		Expect(allocatedIPs(n)).NotTo(ContainElement(ip.String()))
		Expect(n.rulesFor(ip)).To(BeEmpty())
	})
})

// delBare runs the binary's DEL as containerd's second DEL comes: the
// netconf without a prevResult, CNI_NETNS empty.
func (n *node) delBare(p *pod) (string, int) {
	cmd := exec.Command(filepath.Join(binDir, "vpc-cni"))
	cmd.Env = []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + p.containerID, "CNI_NETNS=",
		"CNI_IFNAME=eth0", "CNI_PATH=" + binDir, "CNI_ARGS=" + argString(p)}
	cmd.Stdin = bytes.NewReader(n.netconf(nil))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, GinkgoWriter
	err := n.NS.Do(cmd.Run)
	if ee, ok := err.(*exec.ExitError); ok {
		return stdout.String(), ee.ExitCode()
	}
	Expect(err).NotTo(HaveOccurred())
	return stdout.String(), 0
}
