package integration

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
)

// Off the VPC (TEST-NET-3) and in the VPC but on no subnet of the node:
// both are addresses of the stand-in VPC router's namespace.
var (
	internetAddr = netip.MustParseAddr("203.0.113.5")
	vpcAddr      = netip.MustParseAddr("10.0.200.5")
)

const probePort = 9999

var _ = Describe("host SNAT and connmark rules on the real iptables", Label("ipv4", "real-kernel", "ipamd", "snat"), func() {
	It("SNATs pod egress leaving the VPC to the primary address, leaves VPC traffic alone, and goes with AWS_VPC_K8S_CNI_EXTERNALSNAT=true", func() {
		requireRoot()
		iptablesBin, err := exec.LookPath("iptables")
		Expect(err).NotTo(HaveOccurred(), "iptables is needed: make tools installs it (apt-get install iptables)")

		n := newNode("m5.large")
		Expect(n.Host.SysctlSet("net/ipv4/ip_forward", "1")).To(Succeed())

		By("ipamd made the reference's rules: iptables -S prints back exactly the plan")
		nat := n.iptables()
		Expect(hostnat.Current(nat)).To(ConsistOf(planRules(primaryPlan(n, false))), n.iptablesDump(iptablesBin))
		Expect(n.markRules()).To(HaveLen(1), "rule 1024 fwmark 0x80/0x80 lookup main")

		By("the ENIs' far ends go to a VPC-router namespace that holds an internet and a VPC address")
		vpc := vpcRouter(n)
		p := n.newPod("web-0")
		podIP := podAddr(n.add(p))

		By("to the internet: the VPC router sees the primary ENI's address")
		Expect(sendAndSee(p, vpc, internetAddr)).To(Equal(netip.MustParseAddr("10.0.1.10")))
		By("to the VPC: it sees the pod's own address")
		Expect(sendAndSee(p, vpc, vpcAddr)).To(Equal(podIP))

		By("a reconcile pass is idempotent: a restarted ipamd adds no second copy")
		n.restartIpamd()
		Expect(hostnat.Current(nat)).To(ConsistOf(planRules(primaryPlan(n, false))), n.iptablesDump(iptablesBin))

		By("with external SNAT (node ports kept): the nat chains and jumps go, the mangle rules stay, the pod's address leaves untranslated")
		n.killIpamd()
		n.startIpamd(n.instanceType, "--external-snat")
		Expect(hostnat.Current(nat)).To(ConsistOf(planRules(primaryPlan(n, true))), n.iptablesDump(iptablesBin))
		Expect(sendAndSee(p, vpc, internetAddr)).To(Equal(podIP))

		By("with node ports off too: no aws-node rule and no rule 1024 is left")
		n.killIpamd()
		n.startIpamd(n.instanceType, "--external-snat", "--node-port-support=false")
		Expect(hostnat.Current(nat)).To(BeEmpty(), n.iptablesDump(iptablesBin))
		Expect(n.markRules()).To(BeEmpty())
		Expect(n.del(p)).To(Succeed())
	})

	It("refuses a malformed setting before touching anything", func() {
		requireRoot()
		n := newNode("t3.medium")
		n.killIpamd()
		for _, bad := range [][]string{{"--connmark", "0"}, {"--randomize-snat", "fully"}, {"--exclude-snat-cidrs", "10.0.0.0/33"}} {
			out, err := n.runIpamdOnce(bad...)
			Expect(err).To(HaveOccurred(), "ipamd %v started", bad)
			Expect(out).To(ContainSubstring(bad[0]), "ipamd %v: %s", bad, out)
		}
	})
})

// iptables is go-iptables in the node namespace: each call execs iptables
// from a thread inside it.
func (n *node) iptables() hostnat.Tables { return nsTables{n.NS} }

type nsTables struct{ ns *testns.NS }

func (t nsTables) do(fn func(hostnat.Tables) error) error {
	return t.ns.Do(func() error {
		ipt, err := newIPTables()
		if err != nil {
			return err
		}
		return fn(ipt)
	})
}

func (t nsTables) ListChains(table string) (out []string, err error) {
	err = t.do(func(ipt hostnat.Tables) (e error) { out, e = ipt.ListChains(table); return })
	return
}
func (t nsTables) List(table, chain string) (out []string, err error) {
	err = t.do(func(ipt hostnat.Tables) (e error) { out, e = ipt.List(table, chain); return })
	return
}
func (t nsTables) ChainExists(table, chain string) (ok bool, err error) {
	err = t.do(func(ipt hostnat.Tables) (e error) { ok, e = ipt.ChainExists(table, chain); return })
	return
}
func (t nsTables) NewChain(table, chain string) error {
	return t.do(func(ipt hostnat.Tables) error { return ipt.NewChain(table, chain) })
}
func (t nsTables) ClearChain(table, chain string) error {
	return t.do(func(ipt hostnat.Tables) error { return ipt.ClearChain(table, chain) })
}
func (t nsTables) DeleteChain(table, chain string) error {
	return t.do(func(ipt hostnat.Tables) error { return ipt.DeleteChain(table, chain) })
}
func (t nsTables) Append(table, chain string, spec ...string) error {
	return t.do(func(ipt hostnat.Tables) error { return ipt.Append(table, chain, spec...) })
}
func (t nsTables) Delete(table, chain string, spec ...string) error {
	return t.do(func(ipt hostnat.Tables) error { return ipt.Delete(table, chain, spec...) })
}

// primaryPlan is what the node must hold: the default settings over the
// memory cloud's instance (primary eth0 at 10.0.1.10, VPC 10.0.0.0/16).
func primaryPlan(n *node, external bool) hostnat.Plan {
	return hostnat.PlanFor(hostnat.Config{ExternalSNAT: external, Randomize: hostnat.RandomPRNG, NodePort: true,
		Mark: hostnat.DefaultMark, VethPrefix: "eni", PrimaryLink: "eth0", PrimaryIP: netip.MustParseAddr("10.0.1.10"),
		VPCCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}})
}

func planRules(p hostnat.Plan) []hostnat.Rule {
	var out []hostnat.Rule
	for _, rules := range p.Chains {
		out = append(out, rules...)
	}
	return append(out, p.Builtins...)
}

func (n *node) markRules() []kernel.Rule {
	rules, err := n.Host.RuleList(kernel.FamilyV4)
	Expect(err).NotTo(HaveOccurred())
	var out []kernel.Rule
	for _, r := range rules {
		if hostnat.IsMarkRule(r) {
			out = append(out, r)
		}
	}
	return out
}

// iptablesDump is iptables-save of the node, for a failure's message.
func (n *node) iptablesDump(bin string) string {
	var out []byte
	n.NS.Do(func() error {
		var err error
		out, err = exec.Command(bin + "-save").CombinedOutput()
		return err
	})
	return "the node's iptables:\n" + string(out)
}

// vpcRouter moves the far end of every ENI (vpcN) into a namespace of
// its own that plays the VPC: the ENI's gateway 10.0.N+1.1 on it, and the
// internet and VPC addresses on its loopback, with no reverse-path check
// (SNATed traffic of a secondary ENI's pod arrives on that ENI's far end
// with the primary ENI's address).
func vpcRouter(n *node) *testns.NS {
	vpc, err := testns.New("vpccni-vpc")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { vpc.Close() })
	nodeHandle, err := netlink.NewHandleAt(nsHandle(n.NS))
	Expect(err).NotTo(HaveOccurred())
	defer nodeHandle.Close()
	target := nsHandle(vpc)
	vpcHandle, err := netlink.NewHandleAt(target)
	Expect(err).NotTo(HaveOccurred())
	defer vpcHandle.Close()
	for d := 0; d < 3; d++ {
		l, err := nodeHandle.LinkByName(fmt.Sprintf("vpc%d", d))
		if err != nil {
			continue // no stand-in for an ENI ipamd has not attached
		}
		Expect(nodeHandle.LinkSetNsFd(l, int(target))).To(Succeed())
		l, err = vpcHandle.LinkByName(l.Attrs().Name)
		Expect(err).NotTo(HaveOccurred())
		gw, err := netlink.ParseAddr(fmt.Sprintf("10.0.%d.1/24", d+1))
		Expect(err).NotTo(HaveOccurred())
		Expect(vpcHandle.AddrAdd(l, gw)).To(Succeed())
		Expect(vpcHandle.LinkSetUp(l)).To(Succeed())
	}
	lo, err := vpcHandle.LinkByName("lo")
	Expect(err).NotTo(HaveOccurred())
	Expect(vpcHandle.LinkSetUp(lo)).To(Succeed())
	for _, a := range []netip.Addr{internetAddr, vpcAddr} {
		addr, err := netlink.ParseAddr(a.String() + "/32")
		Expect(err).NotTo(HaveOccurred())
		Expect(vpcHandle.AddrAdd(lo, addr)).To(Succeed())
	}
	Expect(vpc.Do(func() error {
		for _, k := range []string{"all", "default", "lo", "vpc0", "vpc1", "vpc2"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/rp_filter", []byte("0"), 0); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		return nil
	})).To(Succeed())
	return vpc
}

func nsHandle(ns *testns.NS) netns.NsHandle {
	h, err := netns.GetFromPath(ns.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { h.Close() })
	return h
}

// sendAndSee sends one UDP datagram from the pod to dst, from a fresh
// socket (a new source port: a new conntrack entry, so no earlier NAT
// decision is reused), and returns the source address the VPC router's
// listener saw.
func sendAndSee(p *pod, vpc *testns.NS, dst netip.Addr) netip.Addr {
	var conn *net.UDPConn
	Expect(vpc.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, probePort)))
		return err
	})).To(Succeed())
	defer conn.Close()
	payload := []byte("vpccni-" + strings.ReplaceAll(dst.String(), ".", "-"))
	Expect(p.netns.Do(func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, probePort)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	})).To(Succeed())
	Expect(conn.SetReadDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	buf := make([]byte, 64)
	k, from, err := conn.ReadFromUDPAddrPort(buf)
	Expect(err).NotTo(HaveOccurred(), "no datagram reached %s from the pod", dst)
	Expect(string(buf[:k])).To(Equal(string(payload)))
	return from.Addr().Unmap()
}

// newIPTables is go-iptables (IPv4) in the calling thread's namespace.
func newIPTables() (hostnat.Tables, error) { return iptables.NewWithProtocol(iptables.ProtocolIPv4) }
