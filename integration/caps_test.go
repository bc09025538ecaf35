package integration

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

// referenceCaps is the capability set the reference DaemonSet gives the
// aws-node container: NET_ADMIN (12) and NET_RAW (13), nothing else.
const referenceCaps = uint64(1)<<12 | uint64(1)<<13

var _ = Describe("ipamd with the reference DaemonSet's capabilities", Label("ipv4", "real-kernel", "ipamd", "caps"), func() {
	It("runs with only NET_ADMIN and NET_RAW: it makes its stand-in ENI links and serves an ADD and a DEL through vpc-cni", func() {
		requireRoot()
		setpriv, err := exec.LookPath("setpriv")
		Expect(err).NotTo(HaveOccurred(), "setpriv is needed to bound ipamd's capabilities: install the Debian package util-linux")

		n := newNodeWithoutIpamd()
		By("ipamd runs under setpriv with the bounding set NET_ADMIN,NET_RAW and no inheritable capabilities")
		out := &testns.SyncBuffer{}
		done := n.startIpamdUnder(out, "m5.large", setpriv, "--bounding-set=-all,+net_admin,+net_raw", "--inh-caps=-all", "--")
		status := ipamdStatus(n, out, done)
		for _, field := range []string{"CapEff", "CapPrm", "CapBnd"} {
			Expect(capField(status, field)).To(Equal(referenceCaps), "%s of ipamd (pid %d): %s", field, n.ipamd.Process.Pid, status)
		}
		for _, field := range []string{"CapInh", "CapAmb"} {
			Expect(capField(status, field)).To(BeZero(), "%s of ipamd (pid %d): %s", field, n.ipamd.Process.Pid, status)
		}

		By("it starts: both sockets answer")
		waitServing(n, out, done)

		By("it set up the ENIs: eth2, which has no link on this node, got its stand-in with the ENI's MAC, and eth1 and eth2 their tables and rules 32765")
		Eventually(func() error { return enisConfigured(n.Host) }, 10*time.Second, 20*time.Millisecond).Should(Succeed(), "ipamd's log:\n%s", out)

		By("ADD through the real vpc-cni plugin")
		p := n.newPod("web-0")
		res := n.add(p)
		ip := podAddr(res)
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)
		hv, err := n.Host.LinkByName(hostVeth)
		Expect(err).NotTo(HaveOccurred())
		Expect(n.routesFor(ip)).To(ConsistOf(WithTransform(func(r kernel.Route) int { return r.LinkIndex }, Equal(hv.Index))))
		Expect(n.rulesFor(ip)).To(HaveLen(1))
		expectPodSide(p, ip, hv)
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: p.containerID, Pod: "default/web-0", IP: ip.String()}))

		By("DEL through the real vpc-cni plugin: ipamd deletes the veth pair it is handed and releases the address")
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, hostVeth)
		Expect(n.allocations()).To(BeEmpty())
		Expect(linkNames(n.Host)).To(ConsistOf("lo", "eth0", "vpc0", "eth1", "vpc1", "eth2", "vpc2"), "links left in the node namespace")
		ph, err := linux.Opener{}.Open(p.netns.Path())
		Expect(err).NotTo(HaveOccurred())
		defer ph.Close()
		Expect(linkNames(ph)).To(ConsistOf("lo"), "links left in the pod namespace")

		By("ipamd is still running and was refused nothing")
		Consistently(done, 200*time.Millisecond).ShouldNot(BeClosed(), "ipamd's log:\n%s", out)
		Expect(strings.ToLower(out.String())).NotTo(Or(ContainSubstring("operation not permitted"), ContainSubstring("permission denied")), "ipamd's log")
	})
})

// startIpamdUnder starts the node's ipamd command line behind a wrapper
// (wrapper[0] execs the rest, then ipamd, in the same process) inside the
// node namespace. What it prints goes to out and GinkgoWriter; done is
// closed when the process has exited.
func (n *node) startIpamdUnder(out io.Writer, instanceType string, wrapper ...string) <-chan struct{} {
	n.instanceType = instanceType
	ipamd := ipamdCmd(n, instanceType)
	cmd := exec.Command(wrapper[0], append(append(wrapper[1:], ipamd.Path), ipamd.Args[1:]...)...)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(GinkgoWriter, out), io.MultiWriter(GinkgoWriter, out)
	Expect(n.NS.Do(cmd.Start)).To(Succeed())
	n.ipamd = cmd
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	DeferCleanup(func() {
		cmd.Process.Kill()
		<-done
		n.ipamd = nil
	})
	return done
}

// ipamdStatus is /proc/<pid>/status once the wrapper has exec'd ipamd.
func ipamdStatus(n *node, out fmt.Stringer, done <-chan struct{}) string {
	want := filepath.Join(binDir, "ipamd")
	pid := n.ipamd.Process.Pid
	var status string
	Eventually(func(g Gomega) {
		select {
		case <-done:
			StopTrying(fmt.Sprintf("ipamd exited (%v) before it could be inspected; its log:\n%s", n.ipamd.ProcessState, out)).Now()
		default:
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(exe).To(Equal(want))
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		g.Expect(err).NotTo(HaveOccurred())
		status = string(b)
	}, 10*time.Second, 5*time.Millisecond).Should(Succeed())
	return status
}

// capField parses a capability mask (CapEff:\t0000000000003000) of a
// /proc/<pid>/status.
func capField(status, field string) uint64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var mask uint64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask)
			Expect(err).NotTo(HaveOccurred(), line)
			return mask
		}
	}
	Fail("no " + field + " in /proc/<pid>/status:\n" + status)
	return 0
}

// waitServing waits for ipamd's gRPC socket (mode 0660) and its
// introspection socket, failing at once, with its log, if it exits.
func waitServing(n *node, out fmt.Stringer, done <-chan struct{}) {
	Eventually(func(g Gomega) {
		select {
		case <-done:
			StopTrying(fmt.Sprintf("ipamd exited (%v); its log:\n%s", n.ipamd.ProcessState, out)).Now()
		default:
		}
		_, err := os.Stat(n.Sock)
		g.Expect(err).NotTo(HaveOccurred())
		c, err := net.Dial("unix", n.IntrospectSock())
		g.Expect(err).NotTo(HaveOccurred())
		c.Close()
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
	fi, err := os.Stat(n.Sock)
	Expect(err).NotTo(HaveOccurred())
	Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o660)), "ipamd socket mode")
}

// enisConfigured: m5.large's three ENIs of the memory cloud, as ipamd
// leaves them. eth2 is ipamd's stand-in (the memory cloud's MAC for device
// 2, up, its peer vpc2 up, its primary address); eth1 and eth2 each have
// table device+1 with the gateway and default routes, and rule 32765 from
// their primary address to it.
func enisConfigured(h kernel.API) error {
	eth2, err := h.LinkByName("eth2")
	if err != nil {
		return fmt.Errorf("stand-in eth2: %w", err)
	}
	vpc2, err := h.LinkByName("vpc2")
	if err != nil {
		return fmt.Errorf("stand-in peer vpc2: %w", err)
	}
	if eth2.HardwareAddr.String() != "02:00:00:00:02:01" || !eth2.Up || !vpc2.Up {
		return fmt.Errorf("stand-in eth2 %+v, vpc2 %+v", eth2, vpc2)
	}
	addrs, err := h.AddrList(eth2.Index, kernel.FamilyV4)
	if err != nil {
		return err
	}
	if !containsAddr(addrs, "10.0.3.10/24") {
		return fmt.Errorf("eth2 addresses %v: no 10.0.3.10/24", addrs)
	}
	rules, err := h.RuleList(kernel.FamilyV4)
	if err != nil {
		return err
	}
	for dev, src := range map[int]string{1: "10.0.2.10/32", 2: "10.0.3.10/32"} {
		table := dev + 1
		found := false
		for _, r := range rules {
			found = found || (r.Priority == 32765 && r.Table == table && r.Src != nil && r.Src.String() == src)
		}
		if !found {
			return fmt.Errorf("no rule 32765 from %s lookup %d in %+v", src, table, rules)
		}
		routes, err := h.RouteList(kernel.FamilyV4, table)
		if err != nil {
			return err
		}
		gw := fmt.Sprintf("10.0.%d.1", dev+1)
		var def, toGw bool
		for _, r := range routes {
			def = def || ((r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == gw)
			toGw = toGw || (r.Dst != nil && r.Dst.String() == gw+"/32")
		}
		if !def || !toGw {
			return fmt.Errorf("table %d: routes %+v, want %s/32 and default via %s", table, routes, gw, gw)
		}
	}
	return nil
}

func containsAddr(addrs []kernel.Addr, s string) bool {
	for _, a := range addrs {
		if a.IPNet.String() == s {
			return true
		}
	}
	return false
}

func linkNames(h kernel.API) []string {
	links, err := h.LinkList()
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, l := range links {
		names = append(names, l.Name)
	}
	return names
}
