package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realJournal was recorded by the real-kernel suite
// (integration/journal_test.go, VPCCNI_JOURNAL_OUT): #2048 as containerd
// drives it, on Linux.
const realJournal = "../../library/journals/eviction-real-kernel.jsonl"

func TestJournalReplaysClean(t *testing.T) {
	code, out, errs := replay("journal", realJournal)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"16 invocations  policy=default", "ipamd: ListAllocations unreachable, DelNetwork unreachable",
		"- node: rule 1536: from 10.0.2.11 lookup 2", "3 forgotten (unknown pod)", "default/web-6", "divergences from the recorded invocations: 0", "verdict: clean"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The GC lists the sandboxes the runtime still has: the three others'
	// namespaces are gone by then, as they were on Linux (their veths
	// with them, not removed by the GC).
	if n := strings.Count(out, "not among the runtime's valid attachments: its sandbox's namespace"); n != 3 {
		t.Errorf("%d namespaces removed at the GC, want 3:\n%s", n, out)
	}
}

// TestJournalLegacyPolicyLeaks: the same calls under the reference's
// pre-fix DEL leak web-5's rules: exit 1.
func TestJournalLegacyPolicyLeaks(t *testing.T) {
	// Up to the GC, which would collect the leftovers with web-7 (it
	// reused web-5's address).
	b, err := os.ReadFile(realJournal)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "before-gc.jsonl")
	if err := os.WriteFile(cut, []byte(strings.Join(strings.SplitAfter(string(b), "\n")[:14], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := replay("journal", "--quiet", "--policy", "ref-v1.11", cut)
	if code != exitMismatch || !strings.Contains(out, "verdict: LEAK") || !strings.Contains(out, "rule 1536 from 10.0.2.11/32 lookup 2 (default/web-5, deleted)") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if strings.Contains(out, "+ node:") {
		t.Error("--quiet printed kernel diffs")
	}
}

func TestJournalJSON(t *testing.T) {
	code, out, errs := replay("journal", "--json", "-", realJournal)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Journals []struct {
			File    string
			Verdict string
			Steps   []json.RawMessage
			Left    map[string][]string
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Journals) != 1 || doc.Journals[0].Verdict != "clean" || len(doc.Journals[0].Steps) != 16 || len(doc.Journals[0].Left["node"]) == 0 {
		t.Fatalf("%+v", doc)
	}
}

// TestJournalBadInput: unreadable journals exit 2 with the file and the
// line named, and nothing is replayed.
func TestJournalBadInput(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(realJournal)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(good), "\n")
	truncated := filepath.Join(dir, "truncated.jsonl")
	os.WriteFile(truncated, []byte(lines[0]+lines[1][:100]), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	relative := filepath.Join(dir, "relative.jsonl")
	os.WriteFile(relative, []byte(strings.ReplaceAll(lines[0], `/var/run/netns/`, `netns/`)), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{truncated}, "truncated.jsonl: journal line 2: not a journal entry"},
		{[]string{empty}, "the journal has no entries"},
		{[]string{relative}, "is not an absolute path"},
		{[]string{filepath.Join(dir, "missing")}, "no such file"},
		{[]string{}, "no journal file given"},
		{[]string{"--policy", "ref-v9", realJournal}, "ref-v9"},
	} {
		code, out, errs := replay(append([]string{"journal"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.want) || strings.Contains(out, "verdict") {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errs, c.want)
		}
	}
	if code, out, _ := replay("journal", "--help"); code != exitOK || !strings.Contains(out, "journalFile") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}
