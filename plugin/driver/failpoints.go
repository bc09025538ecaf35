package driver

import (
	"fmt"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// Steps lists every named step of setup and teardown, in the order they
// run within each: the points the harness may crash, fail or hang.
var Steps = []string{
	StepRemoveStaleVeth, StepCreateVeth, StepHostSysctls, StepHostVethUp, StepPodLinkUp, StepPodIPv6Enable,
	StepPodGatewayRoute, StepPodDefaultRoute, StepPodAddress, StepPodNeighbour, StepWaitDAD, StepClearStaleRules,
	StepDelOldIIFRules, StepVlanLink, StepVlanRoutes, StepVlanPodRoute, StepRuleIIFVlan, StepRuleIIFVeth,
	StepHostRoute, StepRuleToPod, StepRuleFromPod,
	StepFindOwnVeth, StepCheckHolder, StepDelVlanLink, StepDelIIFRules, StepDelRuleToPod, StepDelRuleFrom,
	StepDelHostRoute, StepDelPodVeth,
}

// stepPoints are the failpoints of the steps, "driver/<step>".
var stepPoints = func() map[string]failpoint.Name {
	m := make(map[string]failpoint.Name, len(Steps))
	for _, s := range Steps {
		m[s] = failpoint.Register("driver/"+s, "the driver's step "+s+", before it touches the kernel")
	}
	return m
}()

// StepPoint is the failpoint of a step.
func StepPoint(step string) failpoint.Name { return stepPoints[step] }

// WithFailpoints returns a copy of the driver that triggers the step
// failpoints armed in s (a crash or hang stops the process there).
func (d *Driver) WithFailpoints(s *failpoint.Set) *Driver {
	c := *d
	c.fp = s
	return &c
}

// SkipSteps arms s so that the driver leaves the steps out, as if they
// did not exist, on every hit: a test removes a step (a teardown's, an
// ownership check) and watches the invariants notice.
func SkipSteps(s *failpoint.Set, steps ...string) error {
	for _, step := range steps {
		if err := s.Skip(StepPoint(step)); err != nil {
			return fmt.Errorf("skip step %q: %w", step, err)
		}
	}
	return nil
}
