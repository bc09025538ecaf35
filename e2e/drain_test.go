package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vpccni/vpccni/internal/testsupport/kubecluster"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// The #2048 drain, as a cluster autoscaler does it: it taints the node
// ToBeDeletedByClusterAutoscaler:NoSchedule and evicts its pods through
// the Eviction API, aws-node among them; then it cancels, and removes
// the taint. aws-node tolerates every taint, so its DaemonSet would put it
// back at once: the stand-in for the autoscaler's timing is a DaemonSet
// that, for the window, does not tolerate the autoscaler's taint (and
// whose template change replaces no pod: OnDelete), restored at the
// cancel.

const autoscalerTaint = "ToBeDeletedByClusterAutoscaler"

// evictAwsNode takes aws-node off the node for the drain's window and
// waits until its ipamd is gone.
func (n *node) evictAwsNode(cp *kubecluster.ControlPlane) {
	ctx := context.Background()
	n.patchDaemonSet(cp, func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		ds.Spec.Template.Spec.Tolerations = nil
	})
	n.patchNode(cp, func(node *corev1.Node) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: autoscalerTaint,
			Value: fmt.Sprint(time.Now().Unix()), Effect: corev1.TaintEffectNoSchedule})
	})
	pod := awsNodePod(cp)
	Expect(pod).NotTo(BeNil())
	By("the autoscaler evicts aws-node through the Eviction API")
	Expect(cp.Client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})).To(Succeed())
	Eventually(func() bool {
		_, err := cp.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 250*time.Millisecond).Should(BeTrue(), "the evicted aws-node pod is gone")
	Expect(awsNodePod(cp)).To(BeNil(), "the DaemonSet must not bring aws-node back during the window")
	_, err := net.DialTimeout("unix", n.Sock, time.Second)
	Expect(err).To(HaveOccurred(), "ipamd still answers on %s", n.Sock)
}

// cancelDrain is the autoscaler's cancel: the taint goes, the DaemonSet
// tolerates every taint again and puts aws-node back.
func (n *node) cancelDrain(cp *kubecluster.ControlPlane) {
	By("the autoscaler cancels: the taint goes and the DaemonSet brings aws-node back")
	n.patchNode(cp, func(node *corev1.Node) {
		var keep []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != autoscalerTaint {
				keep = append(keep, t)
			}
		}
		node.Spec.Taints = keep
	})
	n.patchDaemonSet(cp, func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	})
	n.awsNodeReady(cp)
}

func (n *node) patchDaemonSet(cp *kubecluster.ControlPlane, change func(*appsv1.DaemonSet)) {
	ctx := context.Background()
	dss := cp.Client.AppsV1().DaemonSets("kube-system")
	Eventually(func() error { // the DaemonSet controller updates its status meanwhile
		ds, err := dss.Get(ctx, "aws-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ds)
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}

func (n *node) patchNode(cp *kubecluster.ControlPlane, change func(*corev1.Node)) {
	ctx := context.Background()
	Eventually(func() error { // kubelet updates its Node's status meanwhile
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, kubeletNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(node)
		_, err = cp.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}

// deleteThroughAPI asks the API server to delete pods, and waits until
// kubelet has asked containerd to stop each one's sandbox (containerd logs
// the CRI call; its CNI DEL runs within it), without waiting for the
// deletions to finish.
func (n *node) deleteThroughAPI(cp *kubecluster.ControlPlane, pods ...*sandbox) {
	for _, s := range pods {
		Expect(cp.Client.CoreV1().Pods(s.namespace()).Delete(context.Background(), s.name, metav1.DeleteOptions{})).To(Succeed())
	}
	for _, s := range pods {
		Eventually(func() (string, error) {
			b, err := os.ReadFile(n.cri.log.Name())
			return string(b), err
		}, 60*time.Second, 250*time.Millisecond).Should(ContainSubstring(`StopPodSandbox for \"`+s.id+`\"`),
			"kubelet stops %s's sandbox", s.name)
	}
}

// waitDeleted waits until the pods are gone from the API server: kubelet
// has torn them down (or been told so by the plugin).
func (n *node) waitDeleted(cp *kubecluster.ControlPlane, pods ...*sandbox) {
	for _, s := range pods {
		Eventually(func() bool {
			_, err := cp.Client.CoreV1().Pods(s.namespace()).Get(context.Background(), s.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 120*time.Second, 250*time.Millisecond).Should(BeTrue(), "pod %s gone from the API server", s.name)
	}
}

// drainFindings is everything the drain left wrong, one line each: a
// deleted pod's rule, route or host veth still on the node, its address
// still held by ipamd, an address held twice, or a live pod's objects
// gone.
func (n *node) drainFindings(deleted, live []*sandbox) []string {
	var out []string
	n.reaped()
	rules, err := n.Host.RuleList(kernel.FamilyAll)
	Expect(err).NotTo(HaveOccurred())
	allocs := n.allocations()
	held := map[string]int{}
	for _, a := range allocs {
		held[a.IP]++
		if held[a.IP] == 2 {
			out = append(out, fmt.Sprintf("address %s held twice", a.IP))
		}
	}
	for _, s := range deleted {
		a := net.IP(s.ip.AsSlice())
		for _, r := range rules {
			if (r.Src != nil && r.Src.IP.Equal(a)) || (r.Dst != nil && r.Dst.IP.Equal(a)) {
				out = append(out, fmt.Sprintf("rule left behind: %s (%s, deleted)", ruleString(r), s.name))
			}
		}
		for range n.routesFor(s.ip) {
			out = append(out, fmt.Sprintf("route to %s left behind (%s, deleted)", s.ip, s.name))
		}
		if _, err := n.Host.LinkByName(s.hostVeth()); !kernel.IsNotFound(err) {
			out = append(out, fmt.Sprintf("host veth %s left behind (%s, deleted; %v)", s.hostVeth(), s.name, err))
		}
		if held[s.ip.String()] > 0 {
			out = append(out, fmt.Sprintf("ipamd still holds %s (%s, deleted)", s.ip, s.name))
		}
	}
	for _, s := range live {
		if len(n.rulesFor(s.ip)) == 0 || len(n.routesFor(s.ip)) == 0 {
			out = append(out, fmt.Sprintf("%s's rules or route are gone (%s, live)", s.ip, s.name))
		}
		if held[s.ip.String()] == 0 {
			out = append(out, fmt.Sprintf("ipamd no longer holds %s (%s, live)", s.ip, s.name))
		}
	}
	return out
}

// drain2048 runs the incident on a DaemonSet node: pods, aws-node evicted,
// some pods deleted through the API in the window, the checkpoint kept
// or lost, the cancel; then new pods. It returns the findings, after the
// deleted pods are gone from the API server.
func drain2048(deletePolicy string, loseCheckpoint bool, ipamdArgs ...string) []string {
	cp := kubecluster.Start()
	cp.StartControllers()
	// No cooldown: a freed address is the next one handed out, so a leak
	// would misroute the next pod.
	n := newDaemonSetNodeOf(deletePolicy, cp, "t3.medium", append([]string{"--ip-cooldown", "0s"}, ipamdArgs...)...)
	before := n.snapshotState()
	By("six pods through the API: kubelet's sandboxes get their addresses from ipamd, on both ENIs")
	var pods []*sandbox
	for i := 0; i < 6; i++ { // web-5 on device 1: rules 512 and 1536
		pods = append(pods, n.runPod(cp, apiPod(fmt.Sprintf("web-%d", i))))
	}
	Expect(netip.MustParsePrefix("10.0.2.0/24").Contains(pods[5].ip)).To(BeTrue(), "the sixth pod is on device 1: %s", pods[5].ip)
	for _, p := range pods {
		n.expectUp(p, tableOf(p))
		Expect(n.ping(p.ip)).To(Succeed(), "the node reaches %s at %s", p.name, p.ip)
	}
	deleted, live := []*sandbox{pods[5], pods[1]}, []*sandbox{pods[0], pods[2], pods[3], pods[4]}

	n.evictAwsNode(cp)
	if loseCheckpoint {
		By("the checkpoint is lost with aws-node")
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
	}
	By("pods deleted through the API while aws-node is away")
	n.deleteThroughAPI(cp, deleted...)
	n.cancelDrain(cp)
	n.waitDeleted(cp, deleted...)

	findings := n.drainFindings(deleted, live)
	By("vpccni-audit on the node, with real containerd's sandboxes and ipamd's memory, finds the same")
	code, rep := n.auditNode(deletePolicy)
	expectAuditAgrees(code, rep, findings, deleted, live)
	By("new pods after the drain get addresses no live pod holds")
	for i := 6; i < 9; i++ {
		p := n.runPod(cp, apiPod(fmt.Sprintf("web-%d", i)))
		for _, l := range live {
			if l.ip == p.ip {
				findings = append(findings, fmt.Sprintf("%s given %s, live %s's address", p.name, p.ip, l.name))
			}
		}
		live = append(live, p)
	}
	b, _ := json.MarshalIndent(findings, "", "  ")
	AddReportEntry("drain findings", string(b))
	switch {
	case deletePolicy == "" && len(findings) == 0:
		By("kubelet's invocations, replayed from the plugin's journal on the model, end where the kernel did")
		n.replayJournal(before, live)
		// (After the replay: the model does not delete the veths a DEL
		// hands over to ipamd.)
		By("a pod deleted through the API with aws-node up: kubelet stops its sandbox, and nothing of it is left")
		n.deletePod(cp, live[0])
		n.expectGone(live[0])
		n.expectReleased(live[0])
		for _, p := range live[1:] {
			// Rules and route only: after a lost checkpoint ipamd holds the
			// survivors as recovered allocations, named by their veths.
			Expect(n.rulesFor(p.ip)).NotTo(BeEmpty(), "%s's rules", p.name)
			Expect(n.routesFor(p.ip)).NotTo(BeEmpty(), "%s's route", p.name)
		}
	case deletePolicy != "":
		By("kubelet's invocations, its DEL retries included, replayed under " + deletePolicy + ": the model finds the leak too")
		n.replayLegacyJournal(deletePolicy, deleted)
	}
	return findings
}

// ruleString is a rule as ip rule shows it: "512 to 10.0.2.11/32 lookup
// main".
func ruleString(r kernel.Rule) string {
	sel := ""
	if r.Src != nil {
		sel += " from " + r.Src.String()
	}
	if r.Dst != nil {
		sel += " to " + r.Dst.String()
	}
	table := fmt.Sprint(r.Table)
	if r.Table == kernel.TableMain {
		table = "main"
	}
	return fmt.Sprintf("%d%s lookup %s", r.Priority, sel, table)
}

// replayJournal replays what the plugin journaled on the node (every
// verb kubelet's CRI calls made containerd run, retries included) on the
// kernel model, with vpccni's flow, and checks it ends in the real
// kernel's final state: the node's objects made since before (the node
// with aws-node up, before any pod) and each live pod's own.
func (n *node) replayJournal(before kernel.State, live []*sandbox) {
	entries := n.journalEntries("")
	Expect(entries).NotTo(BeEmpty(), "vpc-cni journaled nothing at %s", n.journal)
	rep, err := playback.Play(entries, playback.Options{})
	Expect(err).NotTo(HaveOccurred())
	Expect(rep.Divergences).To(BeZero(), "the replay diverged from the recording")
	Expect(rep.Verdict()).To(Equal("clean"), "%v", rep.Violations)

	left := map[string][]string{}
	if add, _ := kernel.Diff(before, n.snapshotState()); len(add) > 0 {
		left[playback.NodeNS] = add
	}
	netnsOf := map[string]string{} // container ID -> CNI_NETNS its ADD had
	for _, e := range entries {
		if e.Env.Command == "ADD" {
			netnsOf[e.Env.ContainerID] = e.Env.Netns
		}
	}
	fresh, err := testns.New("vpccni-fresh")
	Expect(err).NotTo(HaveOccurred())
	podBefore := stateAt(fresh.Path())
	Expect(fresh.Close()).To(Succeed())
	for _, s := range live {
		if add, _ := kernel.Diff(podBefore, stateAt(s.netns())); len(add) > 0 {
			left[netnsOf[s.id]] = add
		}
	}
	Expect(rep.Left).To(Equal(left), "the replay's final objects against the real kernel's")
	AddReportEntry("journal replay", fmt.Sprintf("%d invocations replayed, verdict %s", len(entries), rep.Verdict()))
}

func (n *node) snapshotState() kernel.State {
	n.reaped()
	s, err := kernel.Snapshot(n.Host)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// stateAt reads one namespace of the real kernel.
func stateAt(path string) kernel.State {
	s, err := linux.SnapshotAt(path)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// replayLegacyJournal replays the journal of a legacy build's drain under
// the same policy: the model, fed what kubelet really did (its DELs
// retried until the restarted ipamd said "unknown pod"), must find the
// deleted pods' rules leaked as the real kernel kept them.
func (n *node) replayLegacyJournal(deletePolicy string, deleted []*sandbox) {
	entries := n.journalEntries("")
	dels := map[string]int{}
	for _, e := range entries {
		if e.Env.Command == "DEL" {
			dels[e.Env.ContainerID]++
		}
	}
	for _, s := range deleted {
		Expect(dels[s.id]).To(BeNumerically(">", 1), "kubelet retried %s's DEL", s.name)
	}
	pol, err := policy.ByName(deletePolicy)
	Expect(err).NotTo(HaveOccurred())
	rep, err := playback.Play(entries, playback.Options{Policy: pol})
	Expect(err).NotTo(HaveOccurred())
	Expect(rep.Verdict()).To(Equal(invariant.Leak))
	var leaks []string
	for _, v := range rep.Violations {
		leaks = append(leaks, v.String())
	}
	// deleted[0] is web-5, on device 1, whose address no later pod
	// reuses (web-1's was handed out again after the drain, and the new
	// pod's rule is then its own).
	w := deleted[0]
	Expect(leaks).To(ContainElements(
		"LEAK: rule 512 to "+w.ip.String()+"/32 lookup main (default/"+w.name+", deleted)",
		"LEAK: rule 1536 from "+w.ip.String()+"/32 lookup 2 (default/"+w.name+", deleted)"), "the model's leak of %s", w.name)
	AddReportEntry("journal replay", fmt.Sprintf("%d invocations replayed under %s, verdict %s", len(entries), deletePolicy, rep.Verdict()))
}

// tableOf is the route table of a pod's ENI: main for device 0's
// addresses, 2 for device 1's (testns.PlugENIs's subnets).
func tableOf(s *sandbox) int {
	if netip.MustParsePrefix("10.0.2.0/24").Contains(s.ip) {
		return 2
	}
	return kernel.TableMain
}
