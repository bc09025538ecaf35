package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// parseGinkgo counts the specs of a `ginkgo --json-report` file (one
// report per suite). A spec skipped by Skip() carries its reason in
// Failure.Message; one a filter left out carries none. When a
// BeforeSuite fails or skips, every spec is skipped without a message:
// those count as skipped, with the BeforeSuite's reason.
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
		suiteWhy := ""
		for _, sr := range r.SpecReports {
			if !sr.LeafNodeType.Is(types.NodeTypesForSuiteLevelNodes) {
				continue
			}
			name := "[" + sr.LeafNodeType.String() + "]"
			switch {
			case sr.State.Is(types.SpecStateFailureStates):
				s.fail(name, sr.Failure.Message)
				suiteWhy = "not run: " + name + " " + sr.State.String()
			case sr.State.Is(types.SpecStateSkipped) && sr.Failure.Message != "":
				suiteWhy = "not run: " + name + " skipped: " + sr.Failure.Message
			}
		}
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType.Is(types.NodeTypesForSuiteLevelNodes) {
				continue
			}
			name := sr.FullText()
			switch {
			case sr.State.Is(types.SpecStatePassed):
				s.pass()
			case sr.State.Is(types.SpecStateFailureStates):
				s.fail(name, sr.State.String()+": "+sr.Failure.Message)
			case sr.State.Is(types.SpecStatePending):
				s.skip(name, "pending")
			case sr.Failure.Message != "":
				s.skip(name, sr.Failure.Message)
			case suiteWhy != "":
				s.skip(name, suiteWhy)
			default:
				s.NotSelected++
			}
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
