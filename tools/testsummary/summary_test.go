package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// write puts the files of a fabricated bin/reports in a temp dir.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func summary(dir string, args ...string) (string, []Suite) {
	var suites []Suite
	for _, a := range args {
		suites = append(suites, Load(dir, a))
	}
	var b bytes.Buffer
	Print(&b, dir, suites)
	return b.String(), suites
}

// goTestJSON is a `go test -json` stream: a pass, a skip with its reason,
// a failure, and a package whose build failed.
const goTestJSON = `{"Action":"start","Package":"github.com/vpccni/vpccni/kernel/linux"}
{"Action":"run","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestOpen"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestOpen","Output":"=== RUN   TestOpen\n"}
{"Action":"pass","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestOpen"}
{"Action":"run","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestVlanErrno"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestVlanErrno","Output":"=== RUN   TestVlanErrno\n"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestVlanErrno","Output":"    diff_test.go:285: no 802.1Q in this kernel\n"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestVlanErrno","Output":"--- SKIP: TestVlanErrno (0.01s)\n"}
{"Action":"skip","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestVlanErrno"}
{"Action":"run","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestRules"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestRules","Output":"    linux_test.go:40: rule 512 missing\n"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestRules","Output":"--- FAIL: TestRules (0.02s)\n"}
{"Action":"fail","Package":"github.com/vpccni/vpccni/kernel/linux","Test":"TestRules"}
{"Action":"output","Package":"github.com/vpccni/vpccni/kernel/linux","Output":"FAIL\tgithub.com/vpccni/vpccni/kernel/linux\t0.1s\n"}
{"Action":"fail","Package":"github.com/vpccni/vpccni/kernel/linux"}
{"Action":"fail","Package":"github.com/vpccni/vpccni/ipamd/reconcile/realkernel","FailedBuild":"github.com/vpccni/vpccni/ipamd/reconcile/realkernel [github.com/vpccni/vpccni/ipamd/reconcile/realkernel.test]"}
`

func TestGoTestCountsAndReasons(t *testing.T) {
	dir := write(t, map[string]string{"kernel-real.exit": "1\n", "kernel-real.gotest.json": goTestJSON})
	out, suites := summary(dir, "kernel-real:gotest")
	s := suites[0]
	if s.Passed != 1 || s.Failed != 2 || s.Skipped != 1 {
		t.Fatalf("counts %+v\n%s", s, out)
	}
	for _, want := range []string{
		"SKIPPED kernel/linux TestVlanErrno: diff_test.go:285: no 802.1Q in this kernel",
		"FAILED  kernel/linux TestRules: linux_test.go:40: rule 512 missing",
		"FAILED  ipamd/reconcile/realkernel: build failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// ginkgoReport is what `ginkgo --json-report` writes: one spec passed,
// one skipped by Skip() with its reason, one left out by a label filter.
func ginkgoReport(t *testing.T, extra ...types.SpecReport) string {
	t.Helper()
	r := types.Report{SuiteDescription: "real kernel", SuiteSucceeded: true, PreRunStats: types.PreRunStats{TotalSpecs: 3, SpecsThatWillRun: 2}, SpecReports: append([]types.SpecReport{
		{LeafNodeType: types.NodeTypeIt, LeafNodeText: "tears a pod down", State: types.SpecStatePassed},
		{ContainerHierarchyTexts: []string{"branch-ENI pods"}, LeafNodeType: types.NodeTypeIt, LeafNodeText: "strict mode",
			State: types.SpecStateSkipped, Failure: types.Failure{Message: "VLAN links unavailable: operation not supported"}},
		{LeafNodeType: types.NodeTypeIt, LeafNodeText: "bench", State: types.SpecStateSkipped},
	}, extra...)}
	b, err := json.Marshal([]types.Report{r})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGinkgoSkipShowsWithItsReason(t *testing.T) {
	dir := write(t, map[string]string{"integration.exit": "0", "integration.ginkgo.json": ginkgoReport(t)})
	out, suites := summary(dir, "integration:ginkgo")
	s := suites[0]
	if s.Passed != 1 || s.Failed != 0 || s.Skipped != 1 || s.NotSelected != 1 {
		t.Fatalf("counts %+v\n%s", s, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var row, next string
	for i, l := range lines {
		if strings.HasPrefix(l, "integration ") {
			row, next = l, lines[i+1]
		}
	}
	if f := strings.Fields(row); len(f) < 4 || f[1] != "1" || f[2] != "0" || f[3] != "1" {
		t.Errorf("suite row %q", row)
	}
	if next != "    SKIPPED branch-ENI pods strict mode: VLAN links unavailable: operation not supported" {
		t.Errorf("the skip is not listed under its suite with its reason: %q\n%s", next, out)
	}
	if last := lines[len(lines)-1]; last != "1 passed, 0 failed, 1 skipped" {
		t.Errorf("last line %q", last)
	}
	t.Logf("\n%s", out)
}

// TestGinkgoBeforeSuiteFailure: ginkgo leaves the specs out of its report
// when a BeforeSuite fails; they count as skipped, with that reason.
func TestGinkgoBeforeSuiteFailure(t *testing.T) {
	r := types.Report{SuiteDescription: "e2e", PreRunStats: types.PreRunStats{TotalSpecs: 9, SpecsThatWillRun: 8},
		SpecReports: []types.SpecReport{{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStateFailed,
			Failure: types.Failure{Message: "the containerd e2e suite needs crictl: run make tools"}}}}
	b, err := json.Marshal([]types.Report{r})
	if err != nil {
		t.Fatal(err)
	}
	dir := write(t, map[string]string{"e2e.exit": "1", "e2e.ginkgo.json": string(b)})
	out, suites := summary(dir, "e2e:ginkgo")
	s := suites[0]
	if s.Failed != 1 || s.Skipped != 8 || s.NotSelected != 1 {
		t.Errorf("counts %+v\n%s", s, out)
	}
	for _, want := range []string{
		"FAILED  [BeforeSuite]: the containerd e2e suite needs crictl: run make tools",
		"SKIPPED 8 specs not run: [BeforeSuite] failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestMissingReportIsAFailure(t *testing.T) {
	dir := write(t, map[string]string{
		"vet.exit":         "0",
		"unit.exit":        "0", // exit status, but the JSON is missing
		"scenarios.exit":   "0",
		"scenarios.ginkgo": "not the file the summary reads",
	})
	out, suites := summary(dir, "vet", "unit:gotest", "scenarios:ginkgo", "e2e:ginkgo")
	for i, want := range []Suite{{Passed: 1}, {Failed: 1}, {Failed: 1}, {Failed: 1}} {
		if got := suites[i]; got.Passed != want.Passed || got.Failed != want.Failed {
			t.Errorf("%s: %+v, want passed %d failed %d", got.Name, got, want.Passed, want.Failed)
		}
	}
	if !strings.HasSuffix(out, "\n1 passed, 3 failed, 0 skipped\n") {
		t.Errorf("total:\n%s", out)
	}
}

func TestExitStatusWins(t *testing.T) {
	// A clean report but a failed step (a crash after the tests, a build
	// error before them): the suite failed.
	dir := write(t, map[string]string{"integration.exit": "2", "integration.ginkgo.json": ginkgoReport(t), "explore.exit": "1"})
	_, suites := summary(dir, "integration:ginkgo", "explore")
	for _, s := range suites {
		if s.Failed != 1 || !strings.Contains(s.Failures[0].Why, "exit status") {
			t.Errorf("%s: %+v", s.Name, s)
		}
	}
}

func TestFilterShowsWhatGoTestShows(t *testing.T) {
	var raw, human bytes.Buffer
	filter(strings.NewReader(goTestJSON+"not json\n"), &raw, &human)
	if raw.String() != goTestJSON+"not json\n" {
		t.Error("the JSON stream was not kept as it came")
	}
	h := human.String()
	for _, want := range []string{"rule 512 missing", "--- FAIL: TestRules", "--- SKIP: TestVlanErrno", "no 802.1Q", "FAIL\tgithub.com/vpccni/vpccni/kernel/linux", "not json"} {
		if !strings.Contains(h, want) {
			t.Errorf("output lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "TestOpen") || strings.Contains(h, "=== RUN") {
		t.Errorf("a passing test's output or a RUN line was shown:\n%s", h)
	}
}
