package driver

import (
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// TestEveryStepHasAPoint: the explorer enumerates the steps through the
// registry; a step constant missing from Steps would be a point no fault
// ever reaches.
func TestEveryStepHasAPoint(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Steps {
		if seen[s] {
			t.Errorf("step %s listed twice", s)
		}
		seen[s] = true
		if !failpoint.Known(StepPoint(s)) {
			t.Errorf("step %s has no failpoint", s)
		}
	}
	n := 0
	for _, p := range failpoint.All() {
		if strings.HasPrefix(string(p.Name), "driver/") {
			n++
		}
	}
	if n != len(Steps) {
		t.Errorf("%d driver failpoints for %d steps", n, len(Steps))
	}
}
