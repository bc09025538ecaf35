package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/playback"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// journalConf is the node's network with the plugin's journal on.
func (n *node) journalConf(version, path string) *libcni.NetworkConfigList {
	l, err := netConfList(fmt.Sprintf(`{"cniVersion":%q,"name":"aws-cni","plugins":[{"type":"vpc-cni","mtu":"9001",
		"ipamdAddress":"unix://%s","ipamdTimeout":"2s","pluginLogFile":"%s","pluginLogLevel":"debug","journalFile":"%s","stateDir":"%s"}]}`,
		version, n.Sock, n.logFile, path, n.stateDir))
	Expect(err).NotTo(HaveOccurred())
	return l
}

// stateOf reads one namespace of the real kernel.
func stateOf(path string) kernel.State {
	s, err := linux.SnapshotAt(path)
	Expect(err).NotTo(HaveOccurred())
	return s
}

var _ = Describe("the invocation journal", Label("ipv4", "real-kernel", "journal"), func() {
	It("replays on the model to the kernel objects the real kernel ended with", func() {
		// --reconcile=false: nothing but the plugin changes pod objects
		// while the journal is recorded.
		n := newNode("t3.medium", "--reconcile=false") // 5 addresses on device 0, then device 1
		path := filepath.Join(n.Dir, "journal.jsonl")
		n.list = n.journalConf("1.0.0", path)
		nodeBefore := n.snapshotState()
		fresh, err := testns.New("vpccni-fresh")
		Expect(err).NotTo(HaveOccurred())
		podBefore := stateOf(fresh.Path())
		Expect(fresh.Close()).To(Succeed())

		By("six pods (web-5 on device 1: rules 512 and 1536), a CHECK")
		var pods []*pod
		for i := 0; i < 6; i++ {
			p := n.newPod(fmt.Sprintf("web-%d", i))
			n.add(p)
			pods = append(pods, p)
		}
		Expect(n.check(pods[0])).To(Succeed())

		By("aws-node evicted: stopp's DELs tear web-0 and web-5 down from prevResult")
		n.killIpamd()
		Expect(n.del(pods[0])).To(Succeed())
		Expect(n.del(pods[5])).To(Succeed())

		By("aws-node back without its checkpoint; rmp's DEL (no netns, no prevResult) gets unknown pod")
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		n.startIpamd("t3.medium", "--reconcile=false")
		for _, p := range []*pod{pods[0], pods[5]} {
			rt := *p.rt
			rt.NetNS = ""
			Expect(n.NS.Do(func() error { return n.cni.DelNetworkList(context.Background(), n.list, &rt) })).To(Succeed())
		}

		By("web-1's sandbox vanishes before its DEL; web-6 is added; STATUS at CNI 1.1")
		Expect(pods[1].netns.Close()).To(Succeed())
		Expect(n.del(pods[1])).To(Succeed())
		pods = append(pods, n.newPod("web-6"))
		n.add(pods[6])
		Expect(n.NS.Do(func() error {
			return n.cni.GetStatusNetworkList(context.Background(), n.journalConf("1.1.0", path))
		})).To(Succeed())

		By("web-7's sandbox and the runtime's record of it vanish without a DEL; GC collects it")
		pods = append(pods, n.newPod("web-7"))
		web7 := podAddr(n.add(pods[7]))
		Expect(n.Host.LinkDel(ownership.HostVeth("eni", "default", "web-7"))).To(Succeed())
		Expect(pods[7].netns.Close()).To(Succeed())
		Expect(os.Remove(filepath.Join(n.Dir, "cache", "results", "aws-cni-"+pods[7].containerID+"-eth0"))).To(Succeed())
		Expect(n.rulesFor(web7)).NotTo(BeEmpty(), "rules survive their device")
		// The runtime's live sandboxes: web-2, web-3, web-4 and web-6.
		var valid []types.GCAttachment
		for _, i := range []int{2, 3, 4, 6} {
			valid = append(valid, types.GCAttachment{ContainerID: pods[i].containerID, IfName: "eth0"})
		}
		Expect(n.NS.Do(func() error {
			return n.cni.GCNetworkList(context.Background(), n.journalConf("1.1.0", path), &libcni.GCArgs{ValidAttachments: valid})
		})).To(Succeed())
		Expect(n.rulesFor(web7)).To(BeEmpty(), "GC removed web-7's rule")

		// What the invocations left on the real kernel.
		left := map[string][]string{}
		if add, _ := kernel.Diff(nodeBefore, n.snapshotState()); len(add) > 0 {
			left[playback.NodeNS] = add
		}
		for _, p := range pods {
			if _, err := os.Stat(p.netns.Path()); err != nil {
				continue
			}
			if add, _ := kernel.Diff(podBefore, stateOf(p.netns.Path())); len(add) > 0 {
				left[p.netns.Path()] = add
			}
		}
		Expect(left[playback.NodeNS]).To(ContainElement(ContainSubstring("rule 512: from all to 10.0.1.")), "the live pods' rules")

		entries := readJournalFile(path)
		Expect(entries).To(HaveLen(16), "6 ADD, 1 CHECK, 2+2 DEL, 1 DEL, 1 ADD, 1 STATUS, 1 ADD, 1 GC")
		if out := os.Getenv("VPCCNI_JOURNAL_OUT"); out != "" {
			b, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			Expect(os.WriteFile(out, b, 0o644)).To(Succeed())
		}

		By("replayed with vpccni's flow: the same objects, every invocation as recorded, clean")
		rep, err := playback.Play(entries, playback.Options{})
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Divergences).To(BeZero(), "%s", describeSteps(rep))
		Expect(rep.Verdict()).To(Equal("clean"), "%v", rep.Violations)
		Expect(rep.Left).To(Equal(left), "the replay's final objects against the real kernel's")
		Expect(rep.Removed).To(BeEmpty())
		states := map[string]string{}
		for _, p := range rep.Pods {
			states[p.Name] = p.State
		}
		Expect(states).To(HaveKeyWithValue("default/web-7", playback.StateDeleted), "GC collected web-7")
		Expect(states).To(HaveKeyWithValue("default/web-2", playback.StateLive))

		By("replayed up to the GC with the reference's pre-#2048 DEL: web-5's rules leak")
		// (The GC would take them with it: web-7 reused web-5's address,
		// and its teardown removes that address's rules.)
		pol, err := policy.ByName("ref-v1.11")
		Expect(err).NotTo(HaveOccurred())
		legacy, err := playback.Play(entries[:14], playback.Options{Policy: pol})
		Expect(err).NotTo(HaveOccurred())
		Expect(legacy.Verdict()).To(Equal(invariant.Leak))
		var leaks []string
		for _, v := range legacy.Violations {
			leaks = append(leaks, v.String())
		}
		Expect(strings.Join(leaks, "\n")).To(And(ContainSubstring("rule 512 to 10.0.2.11/32 lookup main (default/web-5, deleted)"),
			ContainSubstring("rule 1536 from 10.0.2.11/32 lookup 2 (default/web-5, deleted)")))
	})
})

func (n *node) snapshotState() kernel.State {
	s, err := kernel.Snapshot(n.Host)
	Expect(err).NotTo(HaveOccurred())
	return s
}

func readJournalFile(path string) []journal.Entry {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	es, err := journal.Read(f)
	Expect(err).NotTo(HaveOccurred())
	return es
}

func describeSteps(r *playback.Report) string {
	var b strings.Builder
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "#%d %s %s: recorded %s, replayed %s %v\n", s.N, s.Verb, s.Pod, s.Recorded, s.Replayed, s.Diverged)
	}
	return b.String()
}
