package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// legacyIpamd builds, once per process, the test-only legacydelete ipamd
// of a delete policy: with ref-v1.11, ipamd as the reference's was at the
// #2048 incident (no adoption of the kernel's pods after a lost
// checkpoint, no reconciler, no release queue).
var legacyIpamd = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp(binDir, "legacy-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ipamd")
	cmd := exec.Command("go", "build", "-tags", "legacydelete", "-ldflags", "-X main.deletePolicy=ref-v1.11", "-o", bin, "./ipamd/cmd/ipamd")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -tags legacydelete ipamd: %v: %s", err, out)
	}
	return bin, nil
})

// newLegacyRefNode is a reference node (t3.medium: 5 pod addresses on
// device 0, then device 1) whose ipamd is the legacydelete build of
// ref-v1.11: as the reference's was at the #2048 incident.
func newLegacyRefNode() *refNode {
	bin, err := legacyIpamd()
	Expect(err).NotTo(HaveOccurred())
	n := newRefNode("t3.medium")
	n.killIpamd()
	n.ipamdBin = bin
	n.startIpamd(n.instanceType)
	return n
}

// auditReport is the part of vpccni-audit's --json the specs read.
type auditReport struct {
	Sources []struct {
		Source string
		Read   bool
		Note   string
	}
	Findings []auditFinding
	Fix      *struct {
		DryRun  bool
		Planned []auditFinding
		Removed []struct {
			Finding auditFinding
			Done    bool
			Error   string
		}
		After []auditFinding
		Error string
	}
}

type auditFinding struct {
	Class, Addr, Object, Reason, Show string
	Fixable                           bool
}

// audit runs the vpccni-audit binary on the node as an operator would,
// from the machine's namespace, and returns its exit code and report.
func (n *node) audit(extra ...string) (int, auditReport) {
	code, stdout, stderr := n.auditRaw(append([]string{"--json"}, extra...)...)
	var rep auditReport
	Expect(json.Unmarshal([]byte(stdout), &rep)).To(Succeed(), "vpccni-audit --json: %s %s", stdout, stderr)
	return code, rep
}

// auditRaw runs vpccni-audit with the node's sources (the runtime not
// asked: the suite has none) and extra, and returns its exit code and
// output. Later flags override earlier ones.
func (n *node) auditRaw(extra ...string) (int, string, string) {
	args := append([]string{"--netns", n.NS.Path(), "--checkpoint", n.Checkpoint(), "--cri-endpoint", "",
		"--introspection", "unix:" + n.IntrospectSock(), "--settle", "100ms"}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "vpccni-audit"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	GinkgoWriter.Printf("vpccni-audit %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// foreignRules are another agent's rules at the pods' priorities and
// beside them, on addresses outside ipamd's pool: never findings, never
// removed.
func foreignRules() []kernel.Rule {
	return []kernel.Rule{
		{Priority: 512, Family: kernel.FamilyV4, Dst: ifAddr("192.168.7.7/32"), Table: kernel.TableMain},
		{Priority: 1536, Family: kernel.FamilyV4, Src: ifAddr("192.168.7.8/32"), Table: 100},
		{Priority: 1000, Family: kernel.FamilyV4, Src: ifAddr("10.0.1.0/24"), Table: 101},
	}
}

// objects lists findings as "CLASS ADDR OBJECT", with "[fix]" for those
// --fix may remove.
func objects(fs []auditFinding) []string {
	var out []string
	for _, f := range fs {
		s := f.Class + " " + f.Addr + " " + f.Object
		if f.Fixable {
			s += " [fix]"
		}
		out = append(out, s)
	}
	return out
}

var _ = Describe("vpccni-audit on a real node", Label("audit", "real-kernel"), func() {
	It("finds the #2048 leak the reference's plugin and ipamd leave, and --fix removes exactly it", func() {
		By("aws-node runs ipamd as the reference's was at the incident (ref-v1.11); the reference's plugin networks the pods")
		n := newLegacyRefNode()
		for _, r := range foreignRules() {
			Expect(n.Host.RuleAdd(r)).To(Succeed())
		}
		var pods []refPod
		for i := 0; i < 6; i++ {
			pods = append(pods, n.addPod(n.ref, fmt.Sprintf("r-%d", i)))
		}
		Expect(pods[5].table).To(Equal(2), "the sixth pod is on device 1")
		code, rep := n.audit()
		Expect(objects(rep.Findings)).To(BeEmpty(), "a healthy node with another agent's rules")
		Expect(code).To(Equal(0))
		Expect(rep.Sources).To(ContainElement(HaveField("Source", "ipamd")))
		for _, src := range rep.Sources {
			if src.Source != "runtime" {
				Expect(src.Read).To(BeTrue(), "source %s: %s", src.Source, src.Note)
			}
		}

		By("ipamd is evicted and comes back without its checkpoint; the reference's DELs get 'unknown pod' and tear nothing down")
		n.killIpamd()
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		n.startIpamd(n.instanceType)
		gone, kept := []refPod{pods[0], pods[5]}, pods[1:5]
		for _, p := range gone {
			Expect(n.del(n.ref, p.pod)).To(Succeed())
			Expect(n.jail.ForgetNetns(p.netns.Path())).To(Succeed())
			Expect(p.netns.Close()).To(Succeed())
			Eventually(func() []string { return n.leftovers(p.pod, p.ip) }, "10s", "50ms").Should(
				And(Not(BeEmpty()), HaveEach(HavePrefix("rule "))), "the veth pair went with the namespace; the rules stay")
		}
		a0, a5 := pods[0].ip.String(), pods[5].ip.String()
		leaks := []string{
			"LEAKED " + a0 + " rule 512: from all to " + a0 + " lookup main [fix]",
			"LEAKED " + a5 + " rule 1536: from " + a5 + " lookup 2 [fix]",
			"LEAKED " + a5 + " rule 512: from all to " + a5 + " lookup main [fix]",
		}
		// The pods ipamd forgot are live, but only the runtime could say
		// so: without its answer their veths are reported, never fixed.
		var forgotten []string
		for _, p := range kept {
			veth := ownership.HostVeth("eni", p.ns, p.name)
			forgotten = append(forgotten, fmt.Sprintf("LEAKED %s veth %s (routed %s)", p.ip, veth, p.ip))
		}
		code, rep = n.audit()
		Expect(code).To(Equal(1))
		Expect(objects(rep.Findings)).To(ConsistOf(append(slices.Clone(leaks), forgotten...)))

		By("--fix plans the three leaked rules and, by default, removes nothing")
		code, rep = n.audit("--fix")
		Expect(code).To(Equal(1))
		Expect(rep.Fix).NotTo(BeNil())
		Expect(rep.Fix.DryRun).To(BeTrue())
		Expect(objects(rep.Fix.Planned)).To(ConsistOf(leaks))
		Expect(rep.Fix.Removed).To(BeEmpty())
		Expect(n.leftovers(pods[0].pod, pods[0].ip)).To(HaveLen(1))
		Expect(n.leftovers(pods[5].pod, pods[5].ip)).To(HaveLen(2))

		By("--fix --dry-run=false removes exactly them: the live pods and the other agent's rules stay")
		code, rep = n.audit("--fix", "--dry-run=false")
		Expect(code).To(Equal(1), "the forgotten pods' veths are still findings")
		Expect(rep.Fix.Error).To(BeEmpty())
		var removed []auditFinding
		for _, r := range rep.Fix.Removed {
			Expect(r.Done).To(BeTrue(), "%s: %s", r.Finding.Object, r.Error)
			removed = append(removed, r.Finding)
		}
		Expect(objects(removed)).To(ConsistOf(leaks))
		Expect(objects(rep.Fix.After)).To(ConsistOf(forgotten))
		for _, p := range gone {
			Expect(n.leftovers(p.pod, p.ip)).To(BeEmpty(), p.name)
		}
		for _, p := range kept {
			Expect(n.leftovers(p.pod, p.ip)).To(HaveLen(4), "host veth, route, rule 512 and eth0 of %s", p.name)
		}
		rules, err := n.Host.RuleList(kernel.FamilyV4)
		Expect(err).NotTo(HaveOccurred())
		var after []string
		for _, r := range rules {
			after = append(after, kernel.RuleString(r))
		}
		for _, r := range foreignRules() {
			Expect(after).To(ContainElement(kernel.RuleString(r)), "another agent's rule")
		}
	})

	It("a checkpoint it cannot read: exit 2 with the reason, and --fix changes nothing", func() {
		n := newNode("t3.medium")
		p := n.newPod("web")
		ip := podAddr(n.add(p))
		Expect(n.Host.RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: ifAddr("10.0.1.99/32"), Table: kernel.TableMain})).To(Succeed())
		before := n.leftovers(p, ip)
		bad := filepath.Join(n.Dir, "garbage.json")
		Expect(os.WriteFile(bad, []byte(`{"version":"vpc-cni-ipam/1","allocations":[`), 0o600)).To(Succeed())
		code, stdout, stderr := n.auditRaw("--checkpoint", bad, "--fix", "--dry-run=false")
		Expect(code).To(Equal(2))
		Expect(stdout).To(BeEmpty())
		Expect(stderr).To(ContainSubstring(bad))
		Expect(n.leftovers(p, ip)).To(Equal(before))
		Expect(n.rulesFor(netip.MustParseAddr("10.0.1.99"))).To(HaveLen(1), "the leak stays until the audit can judge it")
	})
})
