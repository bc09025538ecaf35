package cribench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// node is the e2e suite's node: a node namespace with veth stand-ins for
// the ENIs, ipamd (--cloud memory) and containerd in it, whose one network
// is plugin's ("vpc-cni" or "ptp").
type node struct {
	plugin    string
	ns        *testns.NS
	dir       string
	sock      string
	ipamd     *exec.Cmd
	ipamdLog  *os.File
	host      kernel.API
	pluginLog string
	cri       *cri
}

func newNode(plugin string) *node {
	n := &node{plugin: plugin}
	var err error
	n.ns, err = testns.New("vpccni-bench-node")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { n.ns.Close() })
	n.dir, err = os.MkdirTemp("", "vpccni-b-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(n.dir) })
	n.sock = filepath.Join(n.dir, "aws-node", "ipamd.sock")
	n.pluginLog = filepath.Join(n.dir, "plugin.log")
	n.ipamdLog, err = os.Create(filepath.Join(n.dir, "ipamd.log"))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(n.ipamdLog.Close)
	n.host, err = linux.Opener{}.Open(n.ns.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { n.host.Close() })
	Expect(n.host.LinkSetUp("lo")).To(Succeed())
	for d := 0; d < 2; d++ {
		name := fmt.Sprintf("eth%d", d)
		Expect(n.host.AddVeth(kernel.VethSpec{Name: name, PeerName: fmt.Sprintf("vpc%d", d), MTU: 9001})).To(Succeed())
		Expect(n.host.LinkSetUp(name)).To(Succeed())
		Expect(n.host.LinkSetUp(fmt.Sprintf("vpc%d", d))).To(Succeed())
		l, err := n.host.LinkByName(name)
		Expect(err).NotTo(HaveOccurred())
		ipn := &net.IPNet{IP: net.ParseIP(fmt.Sprintf("10.0.%d.10", d+1)).To4(), Mask: net.CIDRMask(24, 32)}
		Expect(n.host.AddrAdd(l.Index, ipn)).To(Succeed())
	}
	eth0, err := n.host.LinkByName("eth0")
	Expect(err).NotTo(HaveOccurred())
	Expect(n.host.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1"), LinkIndex: eth0.Index, Family: kernel.FamilyV4})).To(Succeed())
	n.startIpamd()
	n.startContainerd()
	return n
}

func (n *node) introspectSock() string { return filepath.Join(n.dir, "introspect.sock") }

// startIpamd: ipamd in the node namespace, on the node's own paths; a
// released address rests 1s (not 30s) so a run does not empty the pool.
func (n *node) startIpamd() {
	cmd := exec.Command(filepath.Join(binDir, "ipamd"), "--socket", n.sock, "--cloud", "memory", "--instance-type", "m5.large",
		"--checkpoint", filepath.Join(n.dir, "aws-node", "ipam.json"), "--introspection-address", "unix:"+n.introspectSock(),
		"--metrics-address", "127.0.0.1:61678", "--ip-cooldown", "1s")
	cmd.Stdout, cmd.Stderr = n.ipamdLog, n.ipamdLog
	Expect(n.ns.Do(cmd.Start)).To(Succeed())
	n.ipamd = cmd
	DeferCleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	Eventually(func() error {
		c, err := net.Dial("unix", n.introspectSock())
		if err == nil {
			c.Close()
		}
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed(), "ipamd's introspection socket")
}

func dumpFile(what, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	const max = 20000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	fmt.Fprintf(GinkgoWriter, "---- %s (%s), last %d bytes ----\n%s\n", what, path, len(b), b)
}
