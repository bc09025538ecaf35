package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

// Four adversarial defects (and the range checks of the flags), each
// replayed step by step on the real binaries: a fixed product must pass,
// the defect brought back must fail with its symptom.

// sandbox is a sandbox of the pod with the given container ID: a pod
// recreated with the same name gets a new sandbox, a new namespace and a
// host veth of the same name.
func (n *node) sandbox(name, containerID string) *pod {
	p := n.newPod(name)
	p.containerID, p.rt.ContainerID = containerID, containerID
	for i := range p.rt.Args {
		if p.rt.Args[i][0] == "K8S_POD_INFRA_CONTAINER_ID" {
			p.rt.Args[i][1] = containerID
		}
	}
	return p
}

// forge rewrites the pod's cached result, the prevResult libcni hands the
// next DEL (hostile_test.go's tamper).
func forge(n *node, p *pod, craft func(prev map[string]any)) {
	(&hostileNode{node: n, victim: p}).tamper(func(_ *hostileNode, prev map[string]any) { craft(prev) })
}

// cniCode is the CNI error code of a libcni call's error (0: success).
func cniCode(err error) uint {
	if err == nil {
		return 0
	}
	var ce *types.Error
	Expect(errors.As(err, &ce)).To(BeTrue(), "not a CNI error: %v", err)
	return ce.Code
}

func allocatedIPs(n *node) []string {
	var ips []string
	for _, a := range n.allocations() {
		ips = append(ips, a.IP)
	}
	return ips
}

// sandboxVeth is the ifindex of the node-side peer of the pod's eth0.
func sandboxVeth(p *pod) int {
	h, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	idx, err := ownership.SandboxVeth(h, "eth0")
	Expect(err).NotTo(HaveOccurred())
	Expect(idx).NotTo(BeZero(), "the pod's eth0 is a veth")
	return idx
}

func podSnapshot(p *pod) []string {
	h, err := linux.Opener{}.Open(p.netns.Path())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	return snapshot(h)
}

var _ = Describe("the four adversarial defects", Label("real-kernel", "defects"), func() {
	It("keeps the live sandbox's recovered address when the old sandbox's late DEL comes after a same-name recreation and a lost checkpoint", func() {
		log := &testns.SyncBuffer{}
		n := newNode("t3.medium", "--ip-cooldown", "1s")
		n.ipamdOut = log // from the restart on
		hostVeth := ownership.HostVeth("eni", "default", "web-0")

		By("sandbox c-old of default/web-0 is added and deleted normally")
		old := n.sandbox("web-0", "c-old")
		oldIP := podAddr(n.add(old))
		Expect(n.del(old)).To(Succeed())
		time.Sleep(1200 * time.Millisecond) // the cooldown of c-old's address

		By("sandbox c-new of the same pod gets X, the lowest free address")
		nw := n.sandbox("web-0", "c-new")
		x := podAddr(n.add(nw))
		Expect(x).To(Equal(oldIP), "X is the address an ADD takes first whenever it is free")
		newVeth := sandboxVeth(nw)

		By("ipamd is SIGKILLed, its checkpoint lost, and it adopts X from the kernel")
		n.killIpamd()
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		n.restartIpamd()
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: hostVeth, IP: x.String()}), "X recovered for the host veth")

		By("containerd's second DEL of c-old: no netns, no prevResult")
		old.rt.NetNS = ""
		Expect(n.del(old)).To(Succeed())
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: hostVeth, IP: x.String()}), "X must stay held for c-new's host veth after c-old's late DEL")
		// ipamd logs before it replies, but its output reaches the buffer
		// through a pipe: the line may trail the reply by a moment.
		refused := func() string {
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.Contains(l, "release refused") {
					return l
				}
			}
			return ""
		}
		Eventually(refused, 2*time.Second, 20*time.Millisecond).Should(And(ContainSubstring("containerID=c-old"),
			ContainSubstring("heldByHostVeth="+hostVeth), ContainSubstring("ip="+x.String())), "ipamd's log:\n%s", log)

		By("after the cooldown, another pod does not get X, and X is still routed to c-new")
		time.Sleep(1500 * time.Millisecond)
		Expect(podAddr(n.add(n.newPod("web-1")))).NotTo(Equal(x), "X handed out twice")
		Expect(n.routesFor(x)).To(ConsistOf(WithTransform(func(r kernel.Route) int { return r.LinkIndex }, Equal(newVeth))))
		Expect(n.rulesFor(x)).To(HaveLen(1), "c-new's rule 512")

		By("c-new's own DEL proves the veth is its own: torn down and released")
		Expect(n.del(nw)).To(Succeed())
		expectGone(n, nw, x, hostVeth)
		Expect(allocatedIPs(n)).NotTo(ContainElement(x.String()))
	})

	It("releases an address only once its teardown is complete, when the prevResult names a wrong table", func() {
		n := newNode("t3.medium", "--reconcile=false")
		var fillers []netip.Addr
		for _, name := range []string{"filler-a", "filler-b", "filler-c", "filler-d", "filler-e"} {
			fillers = append(fillers, podAddr(n.add(n.newPod(name))))
		}
		p := n.newPod("web-5")
		res := n.add(p)
		x := podAddr(res)
		Expect(res.Interfaces[1].Mac).To(Equal("2"), "the sixth pod is on device 1, table 2")
		rule1536 := kernel.RuleString(ownership.FromPodRule(x, 2))
		Expect(snapshot(n.Host)).To(ContainElement(rule1536))
		Expect(n.rulesFor(x)).To(HaveLen(2), "rules 512 and 1536")

		forge(n, p, func(prev map[string]any) { itfAt(prev, 1)["mac"] = "100" })
		Expect(n.del(p)).To(Succeed())
		Expect(n.rulesFor(x)).NotTo(ContainElement(WithTransform(kernel.RuleString, Equal(rule1536))), "%s left behind", rule1536)
		Expect(n.rulesFor(x)).To(BeEmpty(), "no rule 512 or 1536 of X is left")
		expectGone(n, p, x, ownership.HostVeth("eni", p.ns, p.name))
		Expect(allocatedIPs(n)).NotTo(ContainElement(x.String()), "ipamd released X")
		for _, f := range fillers {
			Expect(n.rulesFor(f)).To(HaveLen(1), "a neighbour's rule 512")
		}
		b, err := os.ReadFile(n.logFile)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(ContainSubstring("the node wins"), "the disagreement is logged")
	})

	DescribeTable("never deletes foreign rules for an address the node does not show to be a pod's",
		func(addr, table string, foreign ...kernel.Rule) {
			n := newNode("t3.medium", "--reconcile=false")
			p := n.newPod("web-0")
			fresh := snapshot(n.Host)
			ip := podAddr(n.add(p))
			podLines := kernel.Minus(snapshot(n.Host), fresh)
			for _, r := range foreign {
				Expect(n.Host.RuleAdd(r)).To(Succeed(), "foreign %s", kernel.RuleString(r))
			}
			forge(n, p, func(prev map[string]any) {
				withIPs(ipAt(1, addr+"/32"))(nil, prev)
				itfAt(prev, 1)["mac"] = table
			})
			// The forged prevResult is set aside (code 7, naming the
			// address); the pod itself is torn down from ipamd's record and
			// its namespace; every foreign line stays.
			nodeBefore := snapshot(n.Host)
			err := n.del(p)
			Expect(kernel.Minus(nodeBefore, snapshot(n.Host))).To(ConsistOf(podLines), "the node lost exactly the pod's own lines (DEL: %v)", err)
			Expect(kernel.Minus(snapshot(n.Host), nodeBefore)).To(BeEmpty(), "the node gained lines")
			for _, r := range foreign {
				Expect(snapshot(n.Host)).To(ContainElement(kernel.RuleString(r)), "a foreign rule went")
			}
			Expect(cniCode(err)).To(Equal(uint(types.ErrInvalidNetworkConfig)), "DEL naming %s: %v", addr, err)
			Expect(err.Error()).To(ContainSubstring(addr))
			Expect(allocatedIPs(n)).NotTo(ContainElement(ip.String()), "ipamd released the pod's own address")
		},
		Entry("an address in no ENI's subnet, with foreign rules at 512 and 1536", "10.99.0.5", "100",
			kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ipnet("10.99.0.5/32"), Table: kernel.TableMain},
			kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: ipnet("10.99.0.5/32"), Table: 100}),
		Entry("eth0's own primary address, with a rule of a pod's shape", "10.0.1.10", "254",
			kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ipnet("10.0.1.10/32"), Table: kernel.TableMain}),
		Entry("eth1's own primary address, with rules of a pod's shape in eth1's table", "10.0.2.10", "2",
			kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ipnet("10.0.2.10/32"), Table: kernel.TableMain},
			kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: ipnet("10.0.2.10/32"), Table: 2}),
	)

	It("GC collects a stale attachment whose sandbox still exists", Label("cni-1.1"), func() {
		n := newNode("t3.medium")
		l := n.list11()
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))
		hostVeth := ownership.HostVeth("eni", p.ns, p.name)
		// The runtime lost its record of the attachment (libcni would
		// otherwise DEL the cached attachment itself): only the plugin's
		// GC, through ipamd's allocations, finds it. Its namespace lives on.
		Expect(os.Remove(filepath.Join(n.Dir, "cache", "results", "aws-cni-"+p.containerID+"-eth0"))).To(Succeed())
		gc := func() error {
			return n.NS.Do(func() error {
				return n.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}})
			})
		}

		Expect(gc()).To(Succeed())
		expectGone(n, p, ip, hostVeth)
		Expect(n.allocations()).To(BeEmpty(), "ipamd still holds the address")

		By("a second GC is a no-op")
		before := snapshot(n.Host)
		Expect(gc()).To(Succeed())
		Expect(snapshot(n.Host)).To(Equal(before))
	})

	It("refuses out-of-range ipamd flags and vpc-cni netconf fields, naming them", Label("ranges"), func() {
		n := newNode("t3.medium")

		By("vpc-cni ADD with a netconf field out of range: CNI code 7 naming it")
		for _, c := range []struct{ pod, field, value, want string }{
			{"web-timeout", "ipamdTimeout", "0s", `ipamdTimeout "0s" is not a duration between 1ms and 5m0s`},
			{"web-mtu", "mtu", "575", `mtu "575" is not an integer between 576 and 9001`},
		} {
			var conf map[string]any
			Expect(json.Unmarshal(n.list.Bytes, &conf)).To(Succeed())
			conf["plugins"].([]any)[0].(map[string]any)[c.field] = c.value
			b, err := json.Marshal(conf)
			Expect(err).NotTo(HaveOccurred())
			list, err := netConfList(string(b))
			Expect(err).NotTo(HaveOccurred())
			p := n.newPod(c.pod)
			before := snapshot(n.Host)
			err = n.NS.Do(func() error { _, err := n.cni.AddNetworkList(context.Background(), list, p.rt); return err })
			Expect(cniCode(err)).To(Equal(uint(types.ErrInvalidNetworkConfig)), "%s %s: %v", c.field, c.value, err)
			Expect(err.Error()).To(ContainSubstring(c.want))
			Expect(n.allocations()).To(BeEmpty())
			Expect(snapshot(n.Host)).To(Equal(before), "the node changed")
			Expect(podSnapshot(p)).NotTo(ContainElement(HavePrefix("link eth0 ")), "the pod got an eth0")
		}

		By("ipamd with a flag out of range exits 2, naming it, and leaves no socket")
		n.killIpamd()
		for _, c := range []struct{ flag, value, want string }{
			{"--reconcile-interval", "-1s", "--reconcile-interval -1s is out of range: want between 1s and 24h0m0s"},
			{"--reconcile-grace", "1ns", "--reconcile-grace 1ns is out of range: want between 30s and 24h0m0s"},
			{"--reconcile-grace", "0s", "--reconcile-grace 0s is out of range: want between 30s and 24h0m0s"},
		} {
			os.Remove(n.Sock)
			os.Remove(n.IntrospectSock())
			start := time.Now()
			out, err := n.runIpamdOnce(c.flag, c.value)
			Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "%s %s: ipamd took too long", c.flag, c.value)
			var ee *exec.ExitError
			Expect(errors.As(err, &ee)).To(BeTrue(), "%s %s: %v\n%s", c.flag, c.value, err, out)
			Expect(ee.ExitCode()).To(Equal(2), "%s %s:\n%s", c.flag, c.value, out)
			Expect(out).To(ContainSubstring(c.want))
			for _, s := range []string{n.Sock, n.IntrospectSock()} {
				_, err := os.Stat(s)
				Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "%s left behind (%v)", s, err)
			}
		}
	})
})
