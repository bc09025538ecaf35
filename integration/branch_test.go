package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// trunkMAC is the memory cloud's trunk ENI on an m5.large (device 2).
const trunkMAC = "02:00:00:00:02:01"

// Branch ENI needs 802.1Q links. This machine's kernel has none: the cases
// are skipped with the reason (a missing kernel feature, the one kind of
// skip CI accepts); they run where the kernel has VLAN support.
var _ = Describe("branch-ENI pods on the real kernel", Label("branch-eni", "real-kernel"), func() {
	for _, mode := range []string{"strict", "standard"} {
		It("tears a "+mode+"-mode branch pod down after ipamd was SIGKILLed", func() {
			if ok, reason := testns.VlanSupported(); !ok {
				Skip("VLAN links unavailable, branch-ENI real-kernel case not run: " + reason)
			}
			n := newBranchNode(mode)
			p := n.newPod("db-0")
			res := n.add(p)
			ip := podAddr(res)
			prefix := "eni"
			if mode == "strict" {
				prefix = ownership.StrictVethPrefix
			}
			hostVeth := ownership.HostVeth(prefix, p.ns, p.name)
			Expect(res.Interfaces[2].Mac).To(Equal("7"), "the dummy carries the VLAN")
			vl, err := n.Host.LinkByName("vlan.eth.7")
			Expect(err).NotTo(HaveOccurred())
			Expect(vl.VlanID).To(Equal(7))
			n.killIpamd()
			Expect(n.del(p)).To(Succeed())
			expectGone(n, p, ip, hostVeth)
			_, err = n.Host.LinkByName("vlan.eth.7")
			Expect(kernel.IsNotFound(err)).To(BeTrue(), "VLAN link left behind")
			rules, _ := n.Host.RuleList(kernel.FamilyV4)
			for _, r := range rules {
				Expect(r.Priority).NotTo(Equal(10), "iif rule left behind: %+v", r)
			}
		})
	}
})

// newBranchNode: a node whose ipamd serves branch ENIs from a static file,
// with the trunk ENI as a link carrying the trunk's MAC.
func newBranchNode(mode string) *node {
	dir, err := os.MkdirTemp("", "vpccni-podeni-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "pod-eni.json")
	Expect(os.WriteFile(file, []byte(`{"default/db-0": {"eniId":"eni-0branch00000007","ifAddress":"0a:bb:00:00:00:07",
		"privateIp":"10.1.0.21","vlanID":7,"subnetCidr":"10.1.0.0/24"}}`), 0o600)).To(Succeed())
	n := newNodeWith("m5.large", func(h kernel.API) {
		mac, _ := net.ParseMAC(trunkMAC)
		Expect(h.AddVeth(kernel.VethSpec{Name: "eth2", PeerName: "vpc2", HardwareAddr: mac, MTU: 9001})).To(Succeed())
		Expect(h.LinkSetUp("eth2")).To(Succeed())
		Expect(h.LinkSetUp("vpc2")).To(Succeed())
	}, "--enable-pod-eni", "--pod-eni-source", "static", "--pod-eni-file", file)
	n.setEnforcingMode(mode)
	return n
}

func (n *node) setEnforcingMode(mode string) {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[{"type":"vpc-cni","podSGEnforcingMode":%q,
		"ipamdAddress":"unix://%s","ipamdTimeout":"2s","pluginLogFile":"%s","pluginLogLevel":"debug","stateDir":"%s"}]}`, mode, n.Sock, n.logFile, n.stateDir)
	list, err := netConfList(conf)
	Expect(err).NotTo(HaveOccurred())
	n.list = list
}
