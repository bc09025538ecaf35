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
				})
			}
		}
	}
})

// The invariants must catch a broken teardown, not only the legacy flows:
// remove one teardown step from vpccni's own flow and the eviction scenario
// must leak exactly what that step removes.
var _ = Describe("a teardown step removed", Label("ipv4", "mutation"), func() {
	s, err := spec.Load("../library/autoscaler-evicts-aws-node.yaml")
	if err != nil {
		panic(err)
	}
	for step, want := range map[string]string{
		driver.StepDelRuleToPod: "rule 512 to",
		driver.StepDelRuleFrom:  "rule 1536 from",
	} {
		It("without "+step+" the invariant reports "+want, func() {
			hook := func(name string) error {
				if name == step {
					return driver.ErrSkipStep
				}
				return nil
			}
			res, err := engine.Run(s, "ipv4", policy.Default{}, engine.Options{DriverHook: hook})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Kinds).To(ContainElement(invariant.Leak))
			Expect(res.Violations).To(ContainElement(WithTransform(func(v invariant.Violation) string { return v.What },
				ContainSubstring(want))))
		})
	}
})
