package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// parseGinkgo counts the specs of a `ginkgo --json-report` file (one
// report per suite). A spec skipped by Skip() carries its reason in
// Failure.Message. The specs a label or focus filter left out are the
// difference between PreRunStats' two counts; the specs meant to run that
// the report does not show as run (a failed or skipped BeforeSuite leaves
// them out, an interrupt skips them) count as skipped, with the reason.
func parseGinkgo(s *Suite, b []byte) error {
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return fmt.Errorf("ginkgo report: %w", err)
	}
	if len(reports) == 0 {
		return fmt.Errorf("ginkgo report holds no suite")
	}
	for _, r := range reports {
		failedBefore := s.Failed
		notRun := "the suite stopped before running them"
		for _, sr := range r.SpecReports {
			if !sr.LeafNodeType.Is(types.NodeTypesForSuiteLevelNodes) {
				continue
			}
			name := "[" + sr.LeafNodeType.String() + "]"
			switch {
			case sr.State.Is(types.SpecStateFailureStates):
				s.fail(name, sr.Failure.Message)
				notRun = name + " " + sr.State.String()
			case sr.State.Is(types.SpecStateSkipped) && sr.Failure.Message != "":
				notRun = name + " skipped: " + sr.Failure.Message
			}
		}
		ran := 0
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType.Is(types.NodeTypesForSuiteLevelNodes) {
				continue
			}
			name := sr.FullText()
			ran++
			switch {
			case sr.State.Is(types.SpecStatePassed):
				s.pass()
			case sr.State.Is(types.SpecStateFailureStates):
				s.fail(name, sr.State.String()+": "+sr.Failure.Message)
			case sr.State.Is(types.SpecStatePending):
				s.skip(name, "pending")
			case sr.Failure.Message != "":
				s.skip(name, sr.Failure.Message)
			default:
				ran-- // filtered out, or never run: counted below
			}
		}
		s.NotSelected += r.PreRunStats.TotalSpecs - r.PreRunStats.SpecsThatWillRun
		if missing := r.PreRunStats.SpecsThatWillRun - ran; missing > 0 {
			s.Skipped += missing
			s.Skips = append(s.Skips, Item{"", oneLine(fmt.Sprintf("%d specs not run: %s", missing, notRun))})
		}
		if !r.SuiteSucceeded && s.Failed == failedBefore {
			why := strings.Join(r.SpecialSuiteFailureReasons, "; ")
			if why == "" {
				why = "ginkgo reports the suite as failed"
			}
			s.fail(r.SuiteDescription, why)
		}
	}
	return nil
}
