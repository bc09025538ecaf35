package engine

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// Skipping the ticks on which ipamd's loops would do nothing (nextTickAt)
// changes nothing a scenario reports: every scenario of the library, in
// every mode and under every policy it names, gives the same result with
// every tick run, its timeline, notes, marks and the times of its step
// findings included.
func TestSkippedTicksChangeNoScenario(t *testing.T) {
	files, err := filepath.Glob("../library/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no library: %v", err)
	}
	for _, file := range files {
		s, err := spec.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range s.Modes {
			for _, pn := range s.Policies() {
				p, err := policy.ByName(pn)
				if err != nil {
					t.Fatal(err)
				}
				var got [2][]byte
				for i, every := range []bool{false, true} {
					res, err := Run(s, mode, p, Options{EveryTick: every})
					if err != nil {
						t.Fatalf("%s %s %s: %v", file, mode, pn, err)
					}
					b, err := json.Marshal(res)
					if err != nil {
						t.Fatal(err)
					}
					// Each run has a directory of its own, and how a crashed
					// ipamd's socket fails a call in flight is the OS's choice.
					b = tempDir.ReplaceAll(b, []byte("vpccni-scenario-N"))
					got[i] = connError.ReplaceAll(b, []byte("connection error: (lost)"))
				}
				if a, b := string(got[0]), string(got[1]); a != b {
					t.Errorf("%s in %s under %s: skipping idle ticks changed the result:\n%s", filepath.Base(file), mode, pn, firstDifference(a, b))
				}
			}
		}
	}
}

var (
	tempDir   = regexp.MustCompile(`vpccni-scenario-[0-9]+`)
	connError = regexp.MustCompile(`connection error: (EOF|write unix [^ ]*: write: broken pipe)`)
)

// firstDifference shows where a and b first differ, with some context.
func firstDifference(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-200, 0)
	return fmt.Sprintf("skipped:    …%s\nevery tick: …%s", a[from:min(i+200, len(a))], b[from:min(i+200, len(b))])
}
