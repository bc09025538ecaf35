package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Kubernetes drives vpc-cni: pods are created and deleted through a real
// API server, scheduled by kube-scheduler, and run by a real kubelet,
// whose CRI calls to containerd 2.4 run the plugin, which deploy/'s
// aws-node DaemonSet installed with ipamd.
var _ = Describe("a real Kubernetes node", Label("kubelet", "k8s"), func() {
	Describe("the #2048 drain: aws-node evicted through the Eviction API, pods deleted in the window, the eviction cancelled", Label("incident-2048"), func() {
		It("networks pods created through the API; leaves nothing of those deleted, in the window or after, and holds no address twice, the checkpoint kept", func() {
			Expect(drain2048("", false)).To(BeEmpty())
		})
		It("leaves nothing of the deleted pods and holds no address twice, the checkpoint lost", func() {
			Expect(drain2048("", true)).To(BeEmpty())
		})
		It("fails on the leaked rules with the reference's pre-#2048 delete flow and ipamd (ref-v1.11) plugged in", func() {
			// The test-only legacydelete builds of vpc-cni and ipamd: the
			// DEL that cannot reach ipamd fails and tears nothing down;
			// the restarted ipamd has forgotten the pods; kubelet's retry
			// gets "unknown pod" and succeeds with no teardown.
			findings := drain2048("ref-v1.11", true)
			Expect(findings).To(ContainElements(
				"rule left behind: 512 to 10.0.2.11/32 lookup main (web-5, deleted)",
				"rule left behind: 1536 from 10.0.2.11/32 lookup 2 (web-5, deleted)",
				"rule left behind: 512 to 10.0.1.12/32 lookup main (web-1, deleted)"), "the #2048 leak")
			// And nothing but the incident: its other half is the forgotten
			// live pods' addresses handed out again.
			Expect(findings).To(HaveEach(Or(HavePrefix("rule left behind: "), HavePrefix("ipamd no longer holds "),
				MatchRegexp(`^web-\d+ given \S+, live web-\d+'s address$`))))
		})
	})
})
