package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	headline = "../../library/autoscaler-evicts-aws-node.yaml"
	twoMin   = "../../library/autoscaler-evicts-aws-node-2m.yaml"
)

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// tableRows are the rows of the table that starts at the SCENARIO header,
// up to the total line.
func tableRows(t *testing.T, out string) (rows []string, total string) {
	t.Helper()
	ls := lines(out)
	if n := len(ls); n > 0 && strings.HasPrefix(ls[n-1], "report: ") {
		ls = ls[:n-1] // the HTML page's path, after the total
	}
	for i, l := range ls {
		if strings.HasPrefix(l, "SCENARIO ") {
			return ls[i+1 : len(ls)-1], ls[len(ls)-1]
		}
	}
	t.Fatalf("no table in:\n%s", out)
	return nil, ""
}

// TestHeadlineFirst: the headline scenario runs first and heads the
// table, whatever the order of the files; each scenario's cells run with
// vpccni's flow first, then the reference's in release order.
func TestHeadlineFirst(t *testing.T) {
	code, out, errs := replay("run", "--mode", "ipv4", twoMin, headline)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if first := lines(out)[0]; !strings.HasPrefix(first, "=== autoscaler-evicts-aws-node (aws/amazon-vpc-cni-k8s#2048)  mode=ipv4  policy=default") {
		t.Errorf("first timeline: %q", first)
	}
	rows, _ := tableRows(t, out)
	var order []string
	for _, r := range rows {
		f := strings.Fields(r)
		order = append(order, f[0]+" "+f[2])
	}
	want := []string{
		"autoscaler-evicts-aws-node default", "autoscaler-evicts-aws-node ref-v1.10", "autoscaler-evicts-aws-node ref-v1.11",
		"autoscaler-evicts-aws-node ref-v1.12.1", "autoscaler-evicts-aws-node ref-current",
		"autoscaler-evicts-aws-node-2m default", "autoscaler-evicts-aws-node-2m ref-v1.10", "autoscaler-evicts-aws-node-2m ref-v1.11",
		"autoscaler-evicts-aws-node-2m ref-v1.12.1", "autoscaler-evicts-aws-node-2m ref-current",
	}
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("table order:\n%s\nwant:\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
}

// TestQuietIsTableAndTotal: --quiet prints the table and the total line,
// nothing else.
func TestQuietIsTableAndTotal(t *testing.T) {
	code, out, _ := replay("run", "--quiet", headline, realJournal)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	ls := lines(out)
	// The header, 20 cells (4 modes x 5 policies), the journal, the total.
	if len(ls) != 23 || !strings.HasPrefix(ls[0], "SCENARIO ") || !regexp.MustCompile(`^eviction-real-kernel +journal +default +clean +ok +clean$`).MatchString(ls[21]) {
		t.Fatalf("--quiet printed %d lines:\n%s", len(ls), out)
	}
	if want := "20/20 cells as expected; vpccni (default) clean everywhere; 1/1 journal replayed clean"; ls[22] != want {
		t.Errorf("total %q, want %q", ls[22], want)
	}
}

// TestTotalLine: the last line counts the cells as expected, says whether
// vpccni's flow was clean everywhere and how many journals replayed
// clean; a mismatch, a finding in vpccni's flow or a journal that did
// not replay clean is named there, and exits 1.
func TestTotalLine(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(headline)
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong.yaml")
	os.WriteFile(wrong, []byte(strings.Replace(string(b), "ref-v1.10: {ipv4: leak,", "ref-v1.10: {ipv4: clean,", 1)), 0o644)
	// vpccni's flow is expected to leak (and does not): a mismatch, and
	// still clean everywhere.
	expectLeak := filepath.Join(dir, "expect-leak.yaml")
	os.WriteFile(expectLeak, []byte(strings.Replace(string(b), "default: clean", "default: leak", 1)), 0o644)
	// A journal whose first ADD recorded another address: the replay
	// diverges from it.
	j, err := os.ReadFile(realJournal)
	if err != nil {
		t.Fatal(err)
	}
	first := lines(string(j))[0]
	diverged := filepath.Join(dir, "diverged.jsonl")
	os.WriteFile(diverged, []byte(strings.Replace(first, `"address":"10.0.1.11/32"`, `"address":"10.0.1.99/32"`, 1)+"\n"), 0o644)
	// A known limit counts apart; without its knownLimit line it is a
	// finding in vpccni's flow.
	limit := filepath.Join("..", "..", "library", "branch-lost-sandbox.yaml")
	lb, err := os.ReadFile(limit)
	if err != nil {
		t.Fatal(err)
	}
	unmarked := filepath.Join(dir, "unmarked.yaml")
	os.WriteFile(unmarked, []byte(regexp.MustCompile(`(?m)^knownLimit:.*\n`).ReplaceAllString(string(lb), "")), 0o644)
	for _, c := range []struct {
		args  []string
		code  int
		total string
	}{
		{[]string{"--policy", "default", limit}, exitOK,
			"2/2 cells as expected; vpccni (default) clean everywhere but 2 known-limit cells " +
				"(branch-lost-sandbox branch-eni-standard, branch-lost-sandbox branch-eni-strict)"},
		{[]string{"--policy", "default", "--mode", "branch-eni-strict", unmarked}, exitOK,
			"1/1 cells as expected; vpccni (default) NOT clean in 1 of 1 cells: branch-lost-sandbox branch-eni-strict (LEAK)"},
		{[]string{"--mode", "ipv4", headline}, exitOK,
			"5/5 cells as expected; vpccni (default) clean everywhere"},
		{[]string{"--mode", "ipv4", wrong}, exitMismatch,
			"4/5 cells as expected, MISMATCH in autoscaler-evicts-aws-node ipv4 ref-v1.10; vpccni (default) clean everywhere"},
		{[]string{"--mode", "ipv4", "--policy", "default", expectLeak}, exitMismatch,
			"0/1 cells as expected, MISMATCH in autoscaler-evicts-aws-node ipv4 default; vpccni (default) clean everywhere"},
		{[]string{"--policy", "ref-v1.11", "--mode", "ipv4", headline, realJournal}, exitOK,
			"1/1 cells as expected; vpccni (default) not run"},
		{[]string{"--policy", "default", headline, realJournal, diverged}, exitMismatch,
			"4/4 cells as expected; vpccni (default) clean everywhere; 1/2 journals replayed clean (not: diverged DIVERGED)"},
		// --mode selects cells: a journal's mode is "journal".
		{[]string{"--mode", "ipv4", "--policy", "default", headline, realJournal}, exitOK,
			"1/1 cells as expected; vpccni (default) clean everywhere"},
		{[]string{"--mode", "journal", headline, realJournal}, exitOK,
			"0/0 cells as expected; vpccni (default) not run; 1/1 journal replayed clean"},
		{[]string{realJournal}, exitOK, "0/0 cells as expected; vpccni (default) not run; 1/1 journal replayed clean"},
	} {
		code, out, errs := replay(append([]string{"run", "--quiet"}, c.args...)...)
		ls := lines(out)
		if code != c.code || ls[len(ls)-1] != c.total {
			t.Errorf("%v: exit %d, total %q; want %d, %q\n%s", c.args, code, ls[len(ls)-1], c.code, c.total, errs)
		}
	}
}

// TestRunBadJournal: a journal that cannot be read stops replay run
// before anything runs (exit 2).
func TestRunBadJournal(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte("{not json\n"), 0o644)
	code, out, errs := replay("run", headline, bad)
	if code != exitUsage || out != "" || !strings.Contains(errs, "bad.jsonl") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestDelAttemptsShowIpamd: every DEL attempt of a timeline says what ipamd
// answered and what the DEL did. Under ref-v1.11 the crux of #2048 is in
// the timeline: kubelet's fourth attempt reaches the restarted ipamd,
// which has forgotten web-0, and the DEL succeeds without tearing down;
// vpccni's DEL tears down from the prevResult first, whatever ipamd says.
func TestDelAttemptsShowIpamd(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   []string
	}{
		{"ref-v1.11", []string{
			`t=0s DEL default/web-0 attempt 1: ipamd: unreachable → error "del cmd: error received from DelNetwork gRPC call", no teardown; kubelet retries in 1s`,
			"t=7s DEL default/web-0 attempt 4: ipamd: unknown pod → success, no teardown",
		}},
		{"ref-v1.12.1", []string{
			`t=0s DEL default/web-1 attempt 1: ipamd: unreachable, then torn down from prevResult (removed 4) → error "del cmd: error received from DelNetwork gRPC call"; kubelet retries in 1s`,
			"t=7s DEL default/web-1 attempt 4: ipamd: unknown pod → success, no teardown",
		}},
		{"default", []string{
			"t=0s DEL default/web-0 attempt 1: torn down from prevResult (removed 3), then ipamd: unreachable → success",
			"t=0s DEL default/web-1 attempt 1: torn down from prevResult (removed 4), then ipamd: unreachable → success",
		}},
	} {
		code, out, _ := replay("run", "--mode", "ipv4", "--policy", c.policy, headline)
		if code != exitOK {
			t.Fatalf("%s: exit %d", c.policy, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the timeline lacks %q", c.policy, w)
			}
		}
		// No DEL line without ipamd's answer (or that it was not asked).
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, " DEL ") && !strings.Contains(l, "ipamd") {
				t.Errorf("%s: %q does not say what ipamd answered", c.policy, l)
			}
		}
	}
	// A DEL the legacy flow answers from ipamd's reply, and one where a
	// branch-ENI pod is torn down from prevResult without asking ipamd.
	_, out, _ := replay("run", "--mode", "branch-eni-strict", "--policy", "ref-v1.11", twoMin)
	if !strings.Contains(out, "DEL default/web-0 attempt 1: torn down from prevResult (removed ") || !strings.Contains(out, "; ipamd not asked → success") {
		t.Errorf("branch pod under ref-v1.11:\n%s", out)
	}
}

// TestHandedOverTeardownNamesItsSource: a DEL that leaves the pod's veth
// to ipamd (vpccni's ipamd answered) tore the pod down from its
// prevResult too, and its timeline says so; the teardown's request
// differs from the prevResult's pod only in what it asks of the teardown.
func TestHandedOverTeardownNamesItsSource(t *testing.T) {
	code, out, _ := replay("run", "--mode", "ipv4", "--policy", "default", "../../library/burst-of-adds-throttled.yaml")
	want := "DEL default/burst-0 attempt 1: torn down from prevResult (removed 2), then ipamd: released "
	if code != exitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d, the timeline lacks %q:\n%s", code, want, out)
	}
}

// TestHelpOnce: each command's --help prints its usage once, on stdout,
// and exits 0; a bad flag is named on stderr (exit 2).
func TestHelpOnce(t *testing.T) {
	for cmd, marker := range map[string]string{"run": "Usage:", "journal": "Usage:", "explore": "Usage:"} {
		code, out, errs := replay(cmd, "--help")
		if code != exitOK || strings.Count(out, marker) != 1 || errs != "" {
			t.Errorf("%s --help: exit %d, %d usages on stdout, stderr %q", cmd, code, strings.Count(out, marker), errs)
		}
		code, out, errs = replay(cmd, "--bogus")
		if code != exitUsage || out != "" || !strings.Contains(errs, "-bogus") || !strings.Contains(errs, "replay "+cmd+" --help") {
			t.Errorf("%s --bogus: exit %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
	}
}

// TestRunJSONHasJournalsAndSummary: --json carries the runs, the journals
// replayed with them and the summary the total line says.
func TestRunJSONHasJournalsAndSummary(t *testing.T) {
	code, out, _ := replay("run", "--json", "-", "--policy", "default", headline, realJournal)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Runs     []json.RawMessage
		Journals []struct{ File, Verdict string }
		Summary  struct {
			Cells, AsExpected, DefaultCells, Journals, JournalsClean int
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	s := doc.Summary
	if len(doc.Runs) != 4 || len(doc.Journals) != 1 || doc.Journals[0].Verdict != "clean" ||
		s.Cells != 4 || s.AsExpected != 4 || s.DefaultCells != 4 || s.Journals != 1 || s.JournalsClean != 1 {
		t.Fatalf("%d runs, journals %+v, summary %+v", len(doc.Runs), doc.Journals, s)
	}
}
