// Package suite runs the scenario library as a Ginkgo suite: one entry per
// scenario × mode × policy, labelled by mode, policy and incident, so that
// `ginkgo --label-filter=incident-2048` selects a cell and a failing cell
// names itself in CI. The same file replays it by hand with
// `go run ./scenarios/cmd/replay run FILE`.
package suite

import (
	"bytes"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/report"
	"github.com/vpccni/vpccni/scenarios/spec"
)

func TestScenarios(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "scenario library")
}

var incidentNo = regexp.MustCompile(`#(\d+)$`)

func library() []*spec.Scenario {
	files, err := filepath.Glob("../library/*.yaml")
	if err != nil || len(files) == 0 {
		panic("no scenario files in ../library")
	}
	var out []*spec.Scenario
	for _, f := range files {
		s, err := spec.Load(f)
		if err != nil {
			panic(err)
		}
		out = append(out, s)
	}
	return out
}

var _ = Describe("library", func() {
	for _, s := range library() {
		for _, mode := range s.Modes {
			for _, pn := range s.Policies() {
				labels := Label(mode, "policy-"+pn)
				if m := incidentNo.FindStringSubmatch(s.Incident); m != nil {
					labels = append(labels, "incident-"+m[1])
				}
				want, _ := s.Expected(pn, mode)
				It(s.Name+" ["+mode+", "+pn+"] is "+want, labels, func() {
					p, err := policy.ByName(pn)
					Expect(err).NotTo(HaveOccurred())
					res, err := engine.Run(s, mode, p, engine.Options{})
					Expect(err).NotTo(HaveOccurred())
					var buf bytes.Buffer
					report.Timeline(&buf, res)
					AddReportEntry("timeline", buf.String())
					Expect(res.Match).To(BeTrue(), "replay: go run ./scenarios/cmd/replay run --policy %s %s\n%s", pn, s.File, buf.String())
					// The node audit, judging the same node from what an
					// operator could read, must agree in every cell, the
					// legacy flows' too: AUDIT-DISAGREES is the least
					// serious kind, so a verdict would hide it.
					Expect(res.Kinds).NotTo(ContainElement(invariant.AuditDisagrees), "%v", res.Violations)
				})
			}
		}
	}
})

// The invariants must catch a broken teardown, not only the legacy flows:
// remove one teardown step from vpccni's own flow, in each mode, and the
// eviction scenario must leak exactly what that step removes — judged with
// the reconciler off, since it would clean up after the broken plugin (the
// next Describe shows it does, for the rules it owns).
var _ = Describe("a teardown step removed", Label("mutation"), func() {
	s, err := spec.Load("../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		panic(err)
	}
	for _, c := range []struct{ mode, step, want string }{
		{"ipv4", driver.StepDelRuleToPod, "rule 512 to"},
		{"ipv4", driver.StepDelRuleFrom, "rule 1536 from"},
		{"ipv6", driver.StepDelRuleToPod, "rule 512 to 2600:"},
		{"branch-eni-strict", driver.StepDelIIFRules, "rule 10 iif"},
		{"branch-eni-strict", driver.StepDelVlanLink, "link vlan.eth."},
		{"branch-eni-standard", driver.StepDelRuleFrom, "rule 1536 from 10.1.0."},
		{"branch-eni-standard", driver.StepDelVlanLink, "link vlan.eth."},
	} {
		It(c.mode+": without "+c.step+" the invariant reports "+c.want, Label(c.mode), func() {
			plugin := policy.Default{}.Ipamd()
			plugin.Reconcile = false
			res, err := engine.Run(s, c.mode, policy.Default{}, engine.Options{SkipSteps: []string{c.step}, Ipamd: &plugin})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Kinds).To(ContainElement(invariant.Leak))
			Expect(res.Violations).To(ContainElement(WithTransform(func(v invariant.Violation) string { return v.What },
				ContainSubstring(c.want))))
			// The node audit finds the same leak from what a node shows.
			Expect(res.Kinds).NotTo(ContainElement(invariant.AuditDisagrees), "%v", res.Violations)
			Expect(res.Audit).NotTo(BeEmpty())
		})
	}
})

// What the plugin misses, ipamd's reconciler reclaims: the rules it owns
// (512/1536 of pool addresses, prio-10 iif rules of gone branch links)
// are gone after the settle even when the plugin's teardown skipped them.
var _ = Describe("the reconciler behind a broken teardown", Label("mutation", "reconciler"), func() {
	s, err := spec.Load("../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		panic(err)
	}
	for _, c := range []struct{ mode, step string }{
		{"ipv4", driver.StepDelRuleToPod},
		{"ipv4", driver.StepDelRuleFrom},
		{"ipv6", driver.StepDelRuleToPod},
		{"branch-eni-strict", driver.StepDelIIFRules},
	} {
		It(c.mode+": without "+c.step+" the node still ends clean", Label(c.mode), func() {
			res, err := engine.Run(s, c.mode, policy.Default{}, engine.Options{SkipSteps: []string{c.step}})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Violations).To(BeEmpty())
		})
	}
})

// #1374's harm, shown by removing PR #1376's fix: without deleting the
// recreated pod's stale iif rules at ADD, its traffic leaves by the old
// VLAN. With the fix the same legacy DEL only leaks the old VLAN's objects.
var _ = Describe("the stale iif rules of a recreated pod", Label("branch-eni-strict", "mutation", "incident-1374"), func() {
	s, err := spec.Load("../library/sgp-recreated-same-name.yaml")
	if err != nil {
		panic(err)
	}
	run := func(skip ...string) *engine.Result {
		res, err := engine.Run(s, "branch-eni-strict", policy.RefV110, engine.Options{SkipSteps: skip})
		Expect(err).NotTo(HaveOccurred())
		return res
	}
	It("are removed by ADD: the legacy DEL leaks, nothing is misrouted", func() {
		res := run()
		Expect(res.Kinds).To(ContainElement(invariant.Leak))
		Expect(res.Kinds).NotTo(ContainElement(invariant.AuditDisagrees), "%v", res.Violations)
		Expect(res.Kinds).NotTo(ContainElement(invariant.Misroute))
	})
	It("misroute the new pod into the old VLAN when ADD keeps them", func() {
		res := run(driver.StepDelOldIIFRules)
		Expect(res.Violations).To(ContainElement(WithTransform(func(v invariant.Violation) string { return v.Kind + " " + v.What },
			And(HavePrefix(invariant.Misroute), ContainSubstring("vlan.eth.1")))))
		Expect(res.Kinds).NotTo(ContainElement(invariant.AuditDisagrees), "%v", res.Violations)
	})
})
