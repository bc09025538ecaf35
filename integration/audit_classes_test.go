package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// sandboxList stands in for the runtime's CRI service: it answers
// ListPodSandbox, the one call the audit makes, with the sandboxes the
// spec says are there, over a real gRPC server on a Unix socket. (The
// e2e suite asks real containerd; here the pods are namespaces the suite
// made, and the runtime is not what is tested.)
type sandboxList struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu    sync.Mutex
	ready map[string]refPod // by container ID
}

func (s *sandboxList) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &runtimeapi.ListPodSandboxResponse{}
	for id, p := range s.ready {
		out.Items = append(out.Items, &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: p.name, Namespace: p.ns, Uid: "uid-" + p.name}})
	}
	return out, nil
}

func (s *sandboxList) set(pods ...refPod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = map[string]refPod{}
	for _, p := range pods {
		s.ready[p.containerID] = p
	}
}

// serveSandboxes starts the stand-in on a socket in the node's directory
// and returns its endpoint.
func (n *node) serveSandboxes(s *sandboxList) string {
	sock := filepath.Join(n.Dir, "cri.sock")
	l, err := net.Listen("unix", sock)
	Expect(err).NotTo(HaveOccurred())
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	go srv.Serve(l)
	DeferCleanup(srv.Stop)
	return "unix://" + sock
}

// dropFromCheckpoint rewrites the (stopped) ipamd's checkpoint without the
// pod's allocation: what the checkpoint bugs that lost live allocations
// left behind.
func (n *node) dropFromCheckpoint(p refPod) {
	f, err := checkpoint.Read(n.Checkpoint())
	Expect(err).NotTo(HaveOccurred())
	before := len(f.Allocations)
	f.Allocations = slices.DeleteFunc(f.Allocations, func(a checkpoint.Allocation) bool { return a.ContainerID == p.containerID })
	Expect(f.Allocations).To(HaveLen(before-1), "the checkpoint held %s", p.name)
	Expect(checkpoint.WriteFile(n.Checkpoint(), *f)).To(Succeed())
}

var _ = Describe("vpccni-audit on a real node, every class", Label("audit", "real-kernel"), func() {
	It("with the runtime's word: MISSING, STRAY, LEAKED and MISROUTE exactly, DOUBLE from the checkpoint, --fix takes only the leak", func() {
		n := newLegacyRefNode()
		// An EKS node forwards; the MISROUTE lookups as if from a pod's
		// veth need it (this is the node's own namespace, not the machine).
		Expect(n.Host.SysctlSet("net/ipv4/conf/all/forwarding", "1")).To(Succeed())
		for _, r := range foreignRules() {
			Expect(n.Host.RuleAdd(r)).To(Succeed())
		}
		var pods []refPod
		for i := 0; i < 7; i++ {
			pods = append(pods, n.addPod(n.ref, fmt.Sprintf("r-%d", i)))
		}
		Expect(pods[5].table).To(Equal(2), "r-5 and r-6 are on device 1")
		runtime := &sandboxList{}
		runtime.set(pods...)
		cri := n.serveSandboxes(runtime)
		audit := func(extra ...string) (int, auditReport) {
			return n.audit(append([]string{"--cri-endpoint", cri}, extra...)...)
		}

		By("healthy: seven live pods on two ENIs, other agents' rules, every source read, forwarding on: clean")
		code, rep := audit()
		Expect(objects(rep.Findings)).To(BeEmpty())
		Expect(code).To(Equal(0))
		for _, src := range rep.Sources {
			Expect(src.Read).To(BeTrue(), "source %s: %s", src.Source, src.Note)
		}

		By("MISSING: r-1's rule 512 is lost and never put back")
		a1 := pods[1].ip.String()
		for _, r := range n.rulesFor(pods[1].ip) {
			Expect(n.Host.RuleDel(r)).To(Succeed())
		}

		By("STRAY: ipamd is evicted; the reference's DEL of r-6 tears down from prevResult but cannot release; ipamd comes back with its checkpoint")
		n.killIpamd()
		Expect(n.del(n.ref, pods[6].pod)).To(Succeed())
		n.runtimeRemovesNetns(pods[6])
		a6 := pods[6].ip.String()

		By("LEAKED and MISROUTE: the checkpoint lost r-0's allocation; the reference's DEL of r-0 gets 'unknown pod' and tears nothing down")
		n.dropFromCheckpoint(pods[0])
		n.startIpamd(n.instanceType)
		Expect(n.del(n.ref, pods[0].pod)).To(Succeed())
		Expect(n.jail.ForgetNetns(pods[0].netns.Path())).To(Succeed())
		Expect(pods[0].netns.Close()).To(Succeed())
		a0 := pods[0].ip.String()
		Eventually(func() []string { return n.leftovers(pods[0].pod, pods[0].ip) }, "10s", "50ms").Should(
			ConsistOf("rule rule 512: from all to "+a0+" lookup main"), "the veth pair went with the namespace; rule 512 stays")
		By("STRAY too: the runtime lost r-4's sandbox (a force delete) and no DEL ran: its veth is still routed its address")
		live := slices.Concat(pods[1:4], pods[5:6])
		runtime.set(live...)
		a4 := pods[4].ip.String()

		leak := "LEAKED " + a0 + " rule 512: from all to " + a0 + " lookup main [fix]"
		rest := []string{
			"MISSING " + a1 + " rule 512: from all to " + a1 + " lookup main",
			"STRAY ALLOCATION " + a6 + " allocation " + pods[6].containerID[:min(12, len(pods[6].containerID))] + " (" + pods[6].ns + "/r-6)",
			// Only the runtime's word makes r-4 gone: its veth and rules
			// look like a live pod's.
			"STRAY ALLOCATION " + a4 + " allocation " + pods[4].containerID[:min(12, len(pods[4].containerID))] + " (" + pods[4].ns + "/r-4)",
			// The leak's harm, by the kernel's own lookup: r-5 on device 1
			// sends to r-0's old address (another node's, once EC2 hands it
			// out again) through main, out of eth0 instead of eth1.
			"MISROUTE " + pods[5].ip.String() + " traffic from " + pods[5].ip.String() + " to " + a0,
		}
		code, rep = audit()
		Expect(code).To(Equal(1))
		Expect(objects(rep.Findings)).To(ConsistOf(append([]string{leak}, rest...)))

		By("--fix --dry-run=false removes the leaked rule and nothing else")
		code, rep = audit("--fix", "--dry-run=false")
		Expect(code).To(Equal(1))
		Expect(rep.Fix.Error).To(BeEmpty())
		Expect(rep.Fix.Removed).To(HaveLen(1))
		Expect(rep.Fix.Removed[0].Done).To(BeTrue(), rep.Fix.Removed[0].Error)
		Expect(objects([]auditFinding{rep.Fix.Removed[0].Finding})).To(ConsistOf(leak))
		Expect(n.leftovers(pods[0].pod, pods[0].ip)).To(BeEmpty())
		for _, p := range live {
			want := 4 // host veth, route, rule 512, eth0
			if p.table != kernel.TableMain {
				want++
			}
			if p.name == "r-1" {
				want-- // its lost rule 512 is reported, never made up
			}
			Expect(n.leftovers(p.pod, p.ip)).To(HaveLen(want), p.name)
		}
		Expect(n.leftovers(pods[4].pod, pods[4].ip)).To(HaveLen(4), "a stray allocation's pod objects are reported, never fixed")
		var after []string
		rules, err := n.Host.RuleList(kernel.FamilyV4)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range rules {
			after = append(after, kernel.RuleString(r))
		}
		for _, r := range foreignRules() {
			Expect(after).To(ContainElement(kernel.RuleString(r)), "another agent's rule")
		}

		By("DOUBLE: with ipamd down, a checkpoint that gives r-2's address to a second sandbox")
		n.killIpamd()
		f, err := checkpoint.ReadUnvalidated(n.Checkpoint())
		Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(f.Allocations, func(a checkpoint.Allocation) bool { return a.ContainerID == pods[2].containerID })
		Expect(i).NotTo(Equal(-1))
		twin := f.Allocations[i]
		twin.ContainerID, twin.Metadata.K8SPodName = "c0ffee000000twin", "r-twin"
		f.Allocations = append(f.Allocations, twin)
		data, err := json.Marshal(f)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(n.Checkpoint(), data, 0o600)).To(Succeed())
		code, rep = audit()
		Expect(code).To(Equal(1))
		a2 := pods[2].ip.String()
		Expect(objects(rep.Findings)).To(ConsistOf(rest[0], rest[1], rest[2], "DOUBLE "+a2+" address "+a2),
			"judged from the checkpoint ipamd would refuse, the kernel and the runtime")
		Expect(rep.Sources).To(ContainElement(And(HaveField("Source", "ipamd"), HaveField("Read", false))))
	})

	It("a leaked rule another agent's rule shadows: --fix leaves both and says why", func() {
		n := newNode("t3.medium")
		leaked := kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ifAddr("10.0.1.99/32"), Table: kernel.TableMain}
		// Listed first, it would answer a plain delete request for the
		// leaked rule: the kernel matches only what a request names.
		shadow := leaked
		shadow.IifName = "eth0"
		Expect(n.Host.RuleAdd(shadow)).To(Succeed())
		Expect(n.Host.RuleAdd(leaked)).To(Succeed())
		code, rep := n.audit()
		Expect(code).To(Equal(1))
		Expect(objects(rep.Findings)).To(ConsistOf("LEAKED 10.0.1.99 rule 512: from all to 10.0.1.99 lookup main [fix]"))
		code, rep = n.audit("--fix", "--dry-run=false")
		Expect(code).To(Equal(1))
		Expect(rep.Fix.Removed).To(HaveLen(1))
		Expect(rep.Fix.Removed[0].Done).To(BeFalse())
		Expect(rep.Fix.Error+rep.Fix.Removed[0].Error).To(ContainSubstring("iif eth0"), "names the rule in the way")
		var rules []string
		for _, r := range n.rulesFor(netip.MustParseAddr("10.0.1.99")) {
			rules = append(rules, kernel.RuleString(r))
		}
		Expect(rules).To(ConsistOf(kernel.RuleString(shadow), kernel.RuleString(leaked)))
	})

	It("a live pod that lost its host route and its allocation: its rules are reported, never removed", func() {
		n := newLegacyRefNode()
		pods := []refPod{n.addPod(n.ref, "r-0"), n.addPod(n.ref, "r-1")}
		runtime := &sandboxList{}
		runtime.set(pods...)
		cri := n.serveSandboxes(runtime)
		By("r-0's host route is taken (as a DEL from a forged prevResult takes it) and the checkpoint loses its allocation")
		for _, r := range n.routesFor(pods[0].ip) {
			Expect(n.Host.RouteDel(r)).To(Succeed())
		}
		n.killIpamd()
		n.dropFromCheckpoint(pods[0])
		n.startIpamd(n.instanceType)
		a0, veth := pods[0].ip.String(), ownership.HostVeth("eni", pods[0].ns, pods[0].name)
		// From the node r-0 looks like a gone pod's leftovers; the runtime
		// says it is ready, so its rule may be its own.
		want := []string{
			"MISSING  host route to veth " + veth,
			"LEAKED " + a0 + " rule 512: from all to " + a0 + " lookup main",
		}
		code, rep := n.audit("--cri-endpoint", cri)
		Expect(code).To(Equal(1))
		Expect(objects(rep.Findings)).To(ConsistOf(want))
		code, rep = n.audit("--cri-endpoint", cri, "--fix", "--dry-run=false")
		Expect(code).To(Equal(1))
		Expect(rep.Fix.Removed).To(BeEmpty())
		Expect(objects(rep.Fix.After)).To(ConsistOf(want))
		Expect(n.rulesFor(pods[0].ip)).To(HaveLen(1), "r-0's rule 512 stays")
	})
})
