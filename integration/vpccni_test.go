package integration

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/releasequeue"
)

var _ = Describe("vpc-cni on the real kernel", Label("ipv4", "real-kernel"), func() {
	It("tears a primary-ENI pod down after ipamd was SIGKILLed (#2048)", Label("incident-2048"), func() {
		n := newNode("m5.large")
		p := n.newPod("web-0")
		res := n.add(p)
		ip := podAddr(res)
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)

		By("ADD made the reference's objects and result")
		Expect(res.Interfaces).To(HaveLen(3))
		Expect(res.Interfaces[0].Name).To(Equal(hostVeth))
		Expect(res.Interfaces[1].Name).To(Equal("eth0"))
		Expect(res.Interfaces[1].Mac).To(Equal("254"), "container mac carries the route table (main)")
		Expect(res.Interfaces[2].Name).To(Equal(ownership.Dummy(p.ns, p.name)))
		Expect(res.Interfaces[2].Sandbox).To(Equal("0"), "dummy sandbox carries the device number")
		hv, err := n.Host.LinkByName(hostVeth)
		Expect(err).NotTo(HaveOccurred())
		Expect(hv.Up).To(BeTrue())
		Expect(n.routesFor(ip)).To(ConsistOf(WithTransform(func(r kernel.Route) int { return r.LinkIndex }, Equal(hv.Index))))
		Expect(n.rulesFor(ip)).To(ConsistOf(And(
			WithTransform(func(r kernel.Rule) int { return r.Priority }, Equal(512)),
			WithTransform(func(r kernel.Rule) int { return r.Table }, Equal(kernel.TableMain)))))
		expectPodSide(p, ip, hv)

		By("ipamd is evicted: SIGKILL")
		n.killIpamd()

		By("DEL through libcni with the cached result as prevResult: torn down, the release queued")
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, hostVeth)
		queued, errs := releasequeue.Queue{Dir: releasequeue.DirFor(n.Sock)}.List()
		Expect(errs).To(BeEmpty())
		Expect(queued).To(HaveLen(1))
		Expect(queued[0].Record.IPs).To(ConsistOf(ip))

		By("DEL again (kubelet retry) while ipamd is away: nothing names the pod's network any more, so the plugin asks for a retry (code 11) rather than answer blind")
		Expect(cniCode(n.del(p))).To(Equal(uint(types.ErrTryAgainLater)))
		expectGone(n, p, ip, hostVeth)

		By("aws-node comes back with its checkpoint: it releases the queued address before it serves, and the retry finishes")
		n.restartIpamd()
		Expect(allocatedIPs(n)).NotTo(ContainElement(ip.String()))
		Expect(n.del(p)).To(Succeed())

		By("the runtime's second DEL with an empty netns")
		p.rt.NetNS = ""
		Expect(n.del(p)).To(Succeed())
		Expect(allocatedIPs(n)).NotTo(ContainElement(ip.String()))
	})

	It("tears a secondary-ENI pod down after ipamd was SIGKILLed, leaving its neighbours alone", func() {
		n := newNode("t3.medium") // 5 pod addresses on device 0
		var fillers []*current.Result
		for i := 0; i < 5; i++ {
			fillers = append(fillers, n.add(n.newPod("filler-"+string(rune('a'+i)))))
		}
		p := n.newPod("web-1")
		res := n.add(p)
		ip := podAddr(res)
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)
		Expect(res.Interfaces[1].Mac).To(Equal("2"))
		Expect(res.Interfaces[2].Sandbox).To(Equal("1"))
		Expect(n.rulesFor(ip)).To(ConsistOf(
			WithTransform(func(r kernel.Rule) [2]int { return [2]int{r.Priority, r.Table} }, Equal([2]int{512, kernel.TableMain})),
			WithTransform(func(r kernel.Rule) [2]int { return [2]int{r.Priority, r.Table} }, Equal([2]int{1536, 2})),
		))

		n.killIpamd()
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, hostVeth)
		for _, f := range fillers {
			Expect(n.rulesFor(podAddr(f))).To(HaveLen(1), "a neighbour's rule 512 must survive")
			Expect(n.routesFor(podAddr(f))).To(HaveLen(1), "a neighbour's host route must survive")
		}
	})

	It("tears an IPv6 pod down after ipamd was SIGKILLed", Label("ipv6"), func() {
		n := newNode("m5.large", "--ipv6")
		p := n.newPod("web-6")
		res := n.add(p) // waits for DAD on the real kernel
		ip := podAddr(res)
		Expect(ip.Is6()).To(BeTrue(), "ipamd --ipv6 gave %s", ip)
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)
		Expect(res.IPs[0].Address.String()).To(Equal(ip.String() + "/128"))
		Expect(res.Interfaces[1].Mac).To(Equal("254"))
		hv, err := n.Host.LinkByName(hostVeth)
		Expect(err).NotTo(HaveOccurred())
		Expect(n.routesFor(ip)).To(ConsistOf(WithTransform(func(r kernel.Route) int { return r.LinkIndex }, Equal(hv.Index))))
		Expect(n.rulesFor(ip)).To(ConsistOf(And(
			WithTransform(func(r kernel.Rule) int { return r.Priority }, Equal(512)),
			WithTransform(func(r kernel.Rule) kernel.Family { return r.Family }, Equal(kernel.FamilyV6)))))
		expectPodSideV6(p, ip.String(), hv)

		n.killIpamd()
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, hostVeth)
	})

	It("answers CHECK through libcni, naming a missing rule", func() {
		n := newNode("t3.medium")
		var res *current.Result
		var p *pod
		for i := 0; i < 6; i++ { // the sixth is on device 1: rules 512 and 1536
			p = n.newPod("chk-" + string(rune('a'+i)))
			res = n.add(p)
		}
		ip := podAddr(res)
		Expect(n.check(p)).To(Succeed())
		for _, r := range n.rulesFor(ip) {
			if r.Priority == 1536 {
				Expect(n.Host.RuleDel(r)).To(Succeed())
			}
		}
		err := n.check(p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("rule 1536 from " + ip.String() + "/32 lookup 2 is missing"))
	})

	It("answers bad input with a CNI error and changes nothing", func() {
		n := newNode("m5.large")
		p := n.newPod("web-0")
		fresh := snapshot(n.Host)
		res := n.add(p)
		before, podBefore := snapshot(n.Host), podSnapshot(p)
		podLines := kernel.Minus(before, fresh)

		By("a malformed netconf")
		out, code := n.runPlugin(p, "DEL", []byte(`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","mtu":`))
		Expect(code).NotTo(Equal(0))
		Expect(out.Code).To(Equal(uint(types.ErrDecodingFailure)))
		Expect(out.Msg).NotTo(BeEmpty())
		Expect(snapshot(n.Host)).To(Equal(before), "the node's kernel objects changed")
		Expect(podSnapshot(p)).To(Equal(podBefore), "the pod's namespace changed")

		By("CNI_ARGS whose pod name is no Kubernetes name")
		cmdArgs := p.rt.Args
		p.rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", "Web_0"}}
		out, code = n.runPlugin(p, "DEL", n.netconf(nil))
		p.rt.Args = cmdArgs
		Expect(code).NotTo(Equal(0))
		Expect(out.Code).To(Equal(uint(types.ErrInvalidEnvironmentVariables)))
		Expect(out.Details).To(ContainSubstring("K8S_POD_NAME"))
		Expect(snapshot(n.Host)).To(Equal(before), "the node's kernel objects changed")
		Expect(podSnapshot(p)).To(Equal(podBefore), "the pod's namespace changed")

		By("an ADD whose CNI_ARGS do not name the pod")
		p.rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}}
		out, code = n.runPlugin(p, "ADD", n.netconf(nil))
		p.rt.Args = cmdArgs
		Expect(code).NotTo(Equal(0))
		Expect(out.Code).To(Equal(uint(types.ErrInvalidEnvironmentVariables)))
		Expect(out.Msg).To(ContainSubstring("K8S_POD_NAME"))
		Expect(snapshot(n.Host)).To(Equal(before), "the node's kernel objects changed")
		Expect(podSnapshot(p)).To(Equal(podBefore), "the pod's namespace changed")
		Expect(allocatedIPs(n)).To(ConsistOf(podAddr(res).String()), "ipamd holds the pod's address, and no other")

		// A bad prevResult is one source among three: it is set aside and
		// named in the error (code 7), and the pod is torn down from what
		// ipamd and its namespace prove. Refusing the DEL would keep the
		// pod's network for good: every retry brings the same prevResult.
		By("a prevResult whose dummy names VLAN \"abc\": set aside, the pod still torn down")
		prev := res
		prev.Interfaces[2].Mac = "abc"
		out, code = n.runPlugin(p, "DEL", n.netconf(prev))
		n.reaped() // the DEL handed the pod's veth pair to ipamd
		Expect(code).NotTo(Equal(0))
		Expect(out.Code).To(Equal(uint(types.ErrInvalidNetworkConfig)))
		Expect(out.Details).To(ContainSubstring("abc"))
		Expect(kernel.Minus(before, snapshot(n.Host))).To(ConsistOf(podLines), "the node lost exactly the pod's lines")
		Expect(kernel.Minus(snapshot(n.Host), before)).To(BeEmpty(), "the node gained lines")
		Expect(allocatedIPs(n)).NotTo(ContainElement(podAddr(res).String()), "ipamd released the pod's address")
	})
})

// netconf is the node's vpc-cni network configuration as a runtime hands
// it to the plugin, with prev as its prevResult (nil: none).
func (n *node) netconf(prev *current.Result) []byte {
	conf := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "mtu": "9001",
		"ipamdAddress": "unix://" + n.Sock, "ipamdTimeout": "2s", "pluginLogFile": n.logFile, "pluginLogLevel": "debug",
		"stateDir": n.stateDir}
	if prev != nil {
		conf["prevResult"] = prev
	}
	b, err := json.Marshal(conf)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// runPlugin executes the vpc-cni binary by hand in the node namespace,
// with the CNI environment, and decodes the CNI error it prints.
func (n *node) runPlugin(p *pod, verb string, stdin []byte) (types.Error, int) {
	cmd := exec.Command(filepath.Join(binDir, "vpc-cni"))
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + p.containerID, "CNI_NETNS=" + p.netns.Path(),
		"CNI_IFNAME=eth0", "CNI_PATH=" + binDir, "CNI_ARGS=" + argString(p)}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, GinkgoWriter
	err := n.NS.Do(cmd.Run)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	var e types.Error
	Expect(json.Unmarshal(stdout.Bytes(), &e)).To(Succeed(), "stdout %q", stdout.String())
	return e, code
}

func argString(p *pod) string {
	var kv []string
	for _, a := range p.rt.Args {
		kv = append(kv, a[0]+"="+a[1])
	}
	return strings.Join(kv, ";")
}

func snapshot(h kernel.API) []string {
	st, err := kernel.Snapshot(h)
	Expect(err).NotTo(HaveOccurred())
	return st.Lines()
}

// expectPodSide checks the pod namespace: eth0 up with the /32, the
// link-local gateway route, the default route and the static neighbour
// pointing at the host veth's MAC.
func expectPodSide(p *pod, ip interface{ String() string }, hv kernel.Link) {
	h, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	Expect(err).NotTo(HaveOccurred())
	Expect(eth0.Up).To(BeTrue())
	Expect(eth0.MTU).To(Equal(9001))
	addrs, err := h.AddrList(eth0.Index, kernel.FamilyV4)
	Expect(err).NotTo(HaveOccurred())
	Expect(addrs).To(ContainElement(WithTransform(func(a kernel.Addr) string { return a.IPNet.String() }, Equal(ip.String()+"/32"))))
	routes, err := h.RouteList(kernel.FamilyV4, kernel.TableMain)
	Expect(err).NotTo(HaveOccurred())
	Expect(routes).To(ContainElement(WithTransform(func(r kernel.Route) string { return r.Gw.String() }, Equal("169.254.1.1"))))
	Expect(routes).To(ContainElement(WithTransform(func(r kernel.Route) string {
		if r.Dst == nil {
			return ""
		}
		return r.Dst.String()
	}, Equal("169.254.1.1/32"))))
	neighs, err := h.NeighList(eth0.Index, kernel.FamilyV4)
	Expect(err).NotTo(HaveOccurred())
	Expect(neighs).To(ContainElement(And(
		WithTransform(func(nb kernel.Neigh) string { return nb.IP.String() }, Equal("169.254.1.1")),
		WithTransform(func(nb kernel.Neigh) string { return nb.HardwareAddr.String() }, Equal(hv.HardwareAddr.String())),
		WithTransform(func(nb kernel.Neigh) int { return nb.State & kernel.NeighStatePermanent }, Equal(kernel.NeighStatePermanent)))))
}

// expectGone: nothing of the pod is left on the node or in its namespace.
func expectGone(n *node, p *pod, ip interface{ AsSlice() []byte }, hostVeth string) {
	a := net.IP(ip.AsSlice())
	rules, err := n.Host.RuleList(kernel.FamilyAll)
	Expect(err).NotTo(HaveOccurred())
	for _, r := range rules {
		for _, sel := range []*net.IPNet{r.Src, r.Dst} {
			Expect(sel != nil && sel.IP.Equal(a)).To(BeFalse(), "rule left behind: %+v", r)
		}
	}
	routes, err := n.Host.RouteList(kernel.FamilyAll, kernel.TableUnspec)
	Expect(err).NotTo(HaveOccurred())
	for _, r := range routes {
		Expect(r.Dst != nil && r.Dst.IP.Equal(a)).To(BeFalse(), "route left behind: %+v", r)
	}
	_, err = n.Host.LinkByName(hostVeth)
	Expect(kernel.IsNotFound(err)).To(BeTrue(), "host veth %s left behind (%v)", hostVeth, err)
	h, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	_, err = h.LinkByName("eth0")
	Expect(kernel.IsNotFound(err)).To(BeTrue(), "pod eth0 left behind (%v)", err)
}

// expectPodSideV6: the /128 is there and no longer tentative, with the
// fe80::1 gateway routes and its permanent neighbour.
func expectPodSideV6(p *pod, ip string, hv kernel.Link) {
	h, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	Expect(err).NotTo(HaveOccurred())
	addrs, err := h.AddrList(eth0.Index, kernel.FamilyV6)
	Expect(err).NotTo(HaveOccurred())
	Expect(addrs).To(ContainElement(And(
		WithTransform(func(a kernel.Addr) string { return a.IPNet.String() }, Equal(ip+"/128")),
		WithTransform(func(a kernel.Addr) int { return a.Flags & kernel.AddrFlagTentative }, Equal(0)))))
	routes, err := h.RouteList(kernel.FamilyV6, kernel.TableMain)
	Expect(err).NotTo(HaveOccurred())
	Expect(routes).To(ContainElement(WithTransform(func(r kernel.Route) string { return r.Gw.String() }, Equal("fe80::1"))))
	neighs, err := h.NeighList(eth0.Index, kernel.FamilyV6)
	Expect(err).NotTo(HaveOccurred())
	Expect(neighs).To(ContainElement(And(
		WithTransform(func(nb kernel.Neigh) string { return nb.IP.String() }, Equal("fe80::1")),
		WithTransform(func(nb kernel.Neigh) string { return nb.HardwareAddr.String() }, Equal(hv.HardwareAddr.String())))))
}
