package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHandSnippetsApply: every hand-chosen mutant's snippet is in its file
// exactly once, so an edit that moves the code it mutates fails here, in
// the unit tests, rather than as an error at the end of make test.
func TestHandSnippetsApply(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	ms, err := parse(filepath.Join(root, "mutants", "hand.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no mutant in mutants/hand.txt")
	}
	for _, m := range ms {
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("%s: %v", m.ID, err)
			continue
		}
		if n := strings.Count(string(src), m.Orig); n != 1 {
			t.Errorf("%s %s: its snippet is in %s %d times, want exactly 1: update mutants/hand.txt with the code it mutates", m.ID, m.Name, m.File, n)
		}
		if m.Orig == m.Repl {
			t.Errorf("%s: the replacement is the original", m.ID)
		}
	}
}
