package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/refcni"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

// refNode is a node on which both plugins run against vpccni's ipamd:
// the reference plugin (aws-cni, built by make tools at the version the
// Makefile pins) and vpc-cni. Their netconf lists share the network name,
// and so libcni's cached result: a DEL by one plugin gets the other's ADD
// result as prevResult, as after an upgrade or a rollback on a live node.
// Every call runs on the jail's thread (internal/testsupport/refcni), inside the node
// namespace: the reference's fixed socket and log paths are the node's
// own there.
type refNode struct {
	*node
	jail     *refcni.Jail
	cni      *libcni.CNIConfig
	ref, vpc *libcni.NetworkConfigList
	refLog   string
}

var (
	refBinOnce sync.Once
	refBinDir  string
	refBinErr  error
)

// refBin copies the reference plugin into a directory of the suite's
// (under /tmp, which the jail shows): the tools cache is not in the jail.
// A missing plugin fails the spec: the suite runs through make, which
// builds it.
func refBin() string {
	refBinOnce.Do(func() {
		var src string
		if src, refBinErr = refcni.Binary(); refBinErr != nil {
			return
		}
		refBinDir = filepath.Join(binDir, "reference")
		if refBinErr = os.MkdirAll(refBinDir, 0o755); refBinErr != nil {
			return
		}
		refBinErr = copyExecutable(src, filepath.Join(refBinDir, "aws-cni"))
	})
	Expect(refBinErr).NotTo(HaveOccurred(), "the reference plugin")
	return refBinDir
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func newRefNode(instanceType string, ipamdArgs ...string) *refNode {
	r := &refNode{node: newNode(instanceType, ipamdArgs...)}
	var err error
	r.jail, err = refcni.NewJail(filepath.Dir(r.Sock))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(r.jail.Close()).To(Succeed()) })
	r.cni = libcni.NewCNIConfigWithCacheDir([]string{refBin(), binDir}, filepath.Join(r.Dir, "cache"),
		&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: GinkgoWriter}})
	r.refLog = filepath.Join(r.Dir, "aws-cni.log")
	r.ref, err = netConfList(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[{"type":"aws-cni","name":"aws-cni",
		"vethPrefix":"eni","mtu":"9001","podSGEnforcingMode":"strict","pluginLogFile":%q,"pluginLogLevel":"DEBUG"}]}`, r.refLog))
	Expect(err).NotTo(HaveOccurred())
	r.vpc = r.list
	return r
}

// call runs one verb of one plugin list through libcni from the jail, in
// the node namespace. The pod's namespace file is bound into the jail
// first (it was made after the jail).
func (r *refNode) call(list *libcni.NetworkConfigList, p *pod, fn func(context.Context) error) error {
	Expect(r.jail.ExposeNetns(p.netns.Path())).To(Succeed())
	return r.jail.Do(r.NS.Path(), func() error { return fn(context.Background()) })
}

func (r *refNode) add(list *libcni.NetworkConfigList, p *pod) *current.Result {
	var res *current.Result
	Expect(r.call(list, p, func(ctx context.Context) error {
		out, err := r.cni.AddNetworkList(ctx, list, p.rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(out)
		return err
	})).To(Succeed(), "%s ADD %s (logs: %s, %s)", list.Plugins[0].Network.Type, p.name, r.refLog, r.logFile)
	return res
}

func (r *refNode) del(list *libcni.NetworkConfigList, p *pod) error {
	err := r.call(list, p, func(ctx context.Context) error { return r.cni.DelNetworkList(ctx, list, p.rt) })
	r.reaped()
	return err
}

func (r *refNode) check(list *libcni.NetworkConfigList, p *pod) error {
	return r.call(list, p, func(ctx context.Context) error { return r.cni.CheckNetworkList(ctx, list, p.rt) })
}

// refPod is one pod with what its ADD made.
type refPod struct {
	*pod
	ip    netip.Addr
	table int
}

func (r *refNode) addPod(list *libcni.NetworkConfigList, name string) refPod {
	p := r.newPod(name)
	res := r.add(list, p)
	ip := podAddr(res)
	table := kernel.TableMain
	for _, rule := range r.rulesFor(ip) {
		if rule.Priority == ownership.PrioFromPod {
			table = rule.Table
		}
	}
	objects := 4 // host veth, host route, rule 512, eth0
	if table != kernel.TableMain {
		objects++ // rule 1536
	}
	Expect(r.leftovers(p, ip)).To(HaveLen(objects), "host veth, host route, rules and eth0 of %s", name)
	return refPod{pod: p, ip: ip, table: table}
}

// leftovers lists what of a pod is still on the node: its host veth (by
// the name both plugins derive from the pod), a route or a rule naming its
// address in any table, its eth0. Empty once a DEL (and, for the
// reference, the runtime's removal of the namespace) has left nothing.
// It is the interop specs' one check: they show it sees what a DEL that
// skips a step leaves.
func (n *node) leftovers(p *pod, ip netip.Addr) []string {
	var out []string
	a := net.IP(ip.AsSlice())
	hostVeth := ownership.HostVeth("eni", p.ns, p.name)
	if _, err := n.Host.LinkByName(hostVeth); !kernel.IsNotFound(err) {
		out = append(out, fmt.Sprintf("host veth %s (%v)", hostVeth, err))
	}
	routes, err := n.Host.RouteList(kernel.FamilyAll, kernel.TableUnspec)
	Expect(err).NotTo(HaveOccurred())
	for _, rt := range routes {
		if rt.Dst != nil && rt.Dst.IP.Equal(a) {
			out = append(out, fmt.Sprintf("route to %s in table %d", rt.Dst, rt.Table))
		}
	}
	rules, err := n.Host.RuleList(kernel.FamilyAll)
	Expect(err).NotTo(HaveOccurred())
	for _, rl := range rules {
		for _, sel := range []*net.IPNet{rl.Src, rl.Dst} {
			if sel != nil && sel.IP.Equal(a) {
				out = append(out, "rule "+kernel.RuleString(rl))
			}
		}
	}
	if h, err := (linux.Opener{}).Open(p.netns.Path()); err == nil {
		if _, err := h.LinkByName("eth0"); !kernel.IsNotFound(err) {
			out = append(out, fmt.Sprintf("pod eth0 (%v)", err))
		}
		h.Close()
	}
	return out
}

// expectReleased: ipamd holds nothing for the pod's sandbox, nor its
// address for anyone.
func (n *node) expectReleased(p refPod) {
	for _, a := range n.allocations() {
		Expect(a.ContainerID).NotTo(Equal(p.containerID), "ipamd still holds %s for %s", a.IP, p.containerID)
		Expect(a.IP).NotTo(Equal(p.ip.String()), "ipamd holds %s for %s", a.IP, a.ContainerID)
	}
}

// runtimeRemovesNetns is what the runtime does after a successful DEL:
// the kernel then removes the links left in it and their host peers (the
// reference's DEL relies on this for the host veth). The jail's bind of
// the namespace goes too, or it would keep the namespace alive.
func (n *refNode) runtimeRemovesNetns(p refPod) {
	Expect(n.jail.ForgetNetns(p.netns.Path())).To(Succeed())
	Expect(p.netns.Close()).To(Succeed())
	Eventually(func() []string { return n.leftovers(p.pod, p.ip) }, "10s", "50ms").Should(BeEmpty(),
		"%s after its namespace is gone", p.name)
}

var _ = Describe("interop with the reference plugin", Label("interop", "real-kernel"), func() {
	It("ADD and DEL by the reference against vpccni's ipamd, on device 0 and device 1", func() {
		n := newRefNode("t3.medium") // 5 pod addresses on device 0, then device 1
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.ref, fmt.Sprintf("ref-%d", i)))
		}
		first, last := pods[0], pods[5]
		Expect(first.table).To(Equal(kernel.TableMain))
		Expect(last.table).To(Equal(2), "the sixth pod is on device 1: rule 1536 to table 2")
		Expect(n.leftovers(last.pod, last.ip)).To(HaveLen(5), "host veth, route, rules 512 and 1536, eth0")
		Expect(n.allocations()).To(HaveLen(6))

		for _, p := range []refPod{first, last} {
			Expect(n.del(n.ref, p.pod)).To(Succeed())
			By("the reference's DEL leaves the veth pair to the namespace's removal, and the check sees it")
			Expect(n.leftovers(p.pod, p.ip)).To(ConsistOf(HavePrefix("host veth "), HavePrefix("pod eth0")), p.name)
			n.expectReleased(p)
			n.runtimeRemovesNetns(p)
		}
		Expect(n.allocations()).To(HaveLen(4), "exactly the two deleted pods' addresses were released")
		for _, p := range pods[1:5] {
			Expect(n.leftovers(p.pod, p.ip)).To(HaveLen(4), "neighbour %s", p.name)
		}
	})

	It("reference ADD, ipamd SIGKILLed, vpc-cni DEL: nothing left, each address released once", func() {
		n := newRefNode("t3.medium")
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.ref, fmt.Sprintf("up-%d", i)))
		}
		n.killIpamd()
		for _, p := range []refPod{pods[0], pods[5]} {
			Expect(n.del(n.vpc, p.pod)).To(Succeed(), "vpc-cni DEL of a reference pod while ipamd is away (log %s)", n.logFile)
			Expect(n.leftovers(p.pod, p.ip)).To(BeEmpty(), "%s right after vpc-cni's DEL", p.name)
		}
		By("the restarted ipamd drains the releases the DELs queued")
		n.startIpamd(n.instanceType, n.ipamdArgs...)
		Eventually(func() int { return len(n.allocations()) }, "10s", "100ms").Should(Equal(4))
		n.expectReleased(pods[0])
		n.expectReleased(pods[5])
		for _, p := range pods[1:5] {
			Expect(n.leftovers(p.pod, p.ip)).To(HaveLen(4), "neighbour %s", p.name)
		}
	})

	It("vpc-cni ADD, ipamd SIGKILLed, reference DEL: torn down from vpc-cni's result, the address reclaimed once", func() {
		// The reference's DEL, when ipamd does not answer, tears the pod
		// down from prevResult and succeeds, leaving the address for ipamd
		// to reclaim: vpccni's reconciler does, once the pod's veth is gone
		// and the allocation is older than the grace (its minimum, 30s).
		n := newRefNode("t3.medium", "--reconcile-interval", "1s", "--reconcile-grace", "30s")
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.vpc, fmt.Sprintf("down-%d", i)))
		}
		n.killIpamd()
		for _, p := range []refPod{pods[0], pods[5]} {
			Expect(n.del(n.ref, p.pod)).To(Succeed(), "reference DEL of a vpc-cni pod while ipamd is away (log %s)", n.refLog)
			Expect(n.leftovers(p.pod, p.ip)).To(ConsistOf(HavePrefix("host veth "), HavePrefix("pod eth0")),
				"the reference tore %s down from vpc-cni's result but for the veth pair", p.name)
			n.runtimeRemovesNetns(p)
		}
		By("ipamd restarts with its checkpoint and its reconciler releases the two addresses")
		n.startIpamd(n.instanceType, n.ipamdArgs...)
		Eventually(func() int { return len(n.allocations()) }, "45s", "500ms").Should(Equal(4))
		n.expectReleased(pods[0])
		n.expectReleased(pods[5])
		for _, p := range pods[1:5] {
			Expect(n.leftovers(p.pod, p.ip)).To(HaveLen(4), "neighbour %s", p.name)
		}
	})

	It("vpc-cni ADD, reference DEL with ipamd up: released through ipamd, nothing left", func() {
		n := newRefNode("t3.medium")
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.vpc, fmt.Sprintf("live-%d", i)))
		}
		for _, p := range []refPod{pods[0], pods[5]} {
			Expect(n.del(n.ref, p.pod)).To(Succeed(), "reference DEL of a vpc-cni pod (log %s)", n.refLog)
			Expect(n.leftovers(p.pod, p.ip)).To(ConsistOf(HavePrefix("host veth "), HavePrefix("pod eth0")), p.name)
			n.expectReleased(p)
			n.runtimeRemovesNetns(p)
		}
		Expect(n.allocations()).To(HaveLen(4))
	})

	It("IPv6: each plugin deletes the other's pod, with ipamd killed for vpc-cni's DEL", Label("ipv6"), func() {
		n := newRefNode("m5.large", "--ipv6")
		byRef := n.addPod(n.ref, "v6-ref")
		byVpc := n.addPod(n.vpc, "v6-vpc")
		Expect(byRef.ip.Is6()).To(BeTrue())
		Expect(n.del(n.ref, byVpc.pod)).To(Succeed(), "reference DEL (log %s)", n.refLog)
		n.expectReleased(byVpc)
		n.runtimeRemovesNetns(byVpc)

		n.killIpamd()
		Expect(n.del(n.vpc, byRef.pod)).To(Succeed(), "vpc-cni DEL (log %s)", n.logFile)
		Expect(n.leftovers(byRef.pod, byRef.ip)).To(BeEmpty())
		n.startIpamd(n.instanceType, n.ipamdArgs...)
		Eventually(func() int { return len(n.allocations()) }, "10s", "100ms").Should(BeZero())
	})

	It("CHECK by vpc-cni passes on a reference pod and names a rule taken from it", func() {
		n := newRefNode("t3.medium")
		p := n.addPod(n.ref, "checked")
		Expect(n.check(n.vpc, p.pod)).To(Succeed(), "vpc-cni CHECK of a reference pod (log %s)", n.logFile)
		for _, rl := range n.rulesFor(p.ip) {
			Expect(n.Host.RuleDel(rl)).To(Succeed())
		}
		err := n.check(n.vpc, p.pod)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(p.ip.String()))
		Expect(n.del(n.vpc, p.pod)).To(Succeed())
		Expect(n.leftovers(p.pod, p.ip)).To(BeEmpty())
	})

	It("restores a checkpoint the reference's own datastore wrote", func() {
		gen, err := refcni.BuildCheckpointGen(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		n := newRefNode("t3.medium")
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.vpc, fmt.Sprintf("ck-%d", i)))
		}
		n.killIpamd()

		By("the reference's datastore writes the same six allocations")
		var allocs []refcni.Allocation
		for _, p := range pods {
			dev := 0
			if p.table != kernel.TableMain {
				dev = p.table - 1
			}
			allocs = append(allocs, refcni.Allocation{ENI: fmt.Sprintf("eni-dev%d", dev), DeviceNumber: dev, IP: p.ip.String(),
				NetworkName: "aws-cni", ContainerID: p.containerID, IfName: "eth0", Namespace: p.ns, Name: p.name})
		}
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		Expect(refcni.WriteCheckpoint(n.jail, gen, n.Checkpoint(), allocs)).To(Succeed())

		n.startIpamd(n.instanceType, n.ipamdArgs...)
		got := n.allocations()
		Expect(got).To(HaveLen(6), "every allocation of the reference's checkpoint restored")
		for _, p := range pods {
			Expect(got).To(ContainElement(And(
				WithTransform(func(a allocation) string { return a.ContainerID }, Equal(p.containerID)),
				WithTransform(func(a allocation) string { return a.IP }, Equal(p.ip.String())))))
		}
		By("a new pod gets none of the restored addresses")
		fresh := n.addPod(n.vpc, "ck-new")
		for _, p := range pods {
			Expect(fresh.ip).NotTo(Equal(p.ip))
		}
		By("the restored pods are deleted, one by each plugin, and released once")
		Expect(n.del(n.vpc, pods[5].pod)).To(Succeed())
		Expect(n.leftovers(pods[5].pod, pods[5].ip)).To(BeEmpty())
		Expect(n.del(n.ref, pods[0].pod)).To(Succeed())
		n.runtimeRemovesNetns(pods[0])
		n.expectReleased(pods[0])
		n.expectReleased(pods[5])
		Expect(n.allocations()).To(HaveLen(5))
	})
})
