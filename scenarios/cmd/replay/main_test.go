package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const lib = "../../library/autoscaler-evicts-aws-node.yaml"

func replay(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunLibrary(t *testing.T) {
	code, out, errs := replay("run", lib)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"autoscaler-evicts-aws-node", "ref-v1.11", "LEAK", "rule 512 to 10.0.2.11", "MISROUTE", "+ rule 512: from all to 10.0.1.11 lookup main"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestExpectationMismatch: a file whose expectation is wrong exits 1.
func TestExpectationMismatch(t *testing.T) {
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	wrong := strings.Replace(string(b), "default: clean", "default: leak", 1)
	f := filepath.Join(t.TempDir(), "wrong.yaml")
	os.WriteFile(f, []byte(wrong), 0o644)
	if code, out, _ := replay("run", "--quiet", f); code != exitMismatch || !strings.Contains(out, "MISMATCH") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func TestBadInput(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(f, []byte("name: x\nmodes: [ipv9]\n"), 0o644)
	for _, args := range [][]string{{"run", f}, {"run", "/no/such/file.yaml"}, {"run", "--policy", "nope", lib}, {"run", "--bogus", lib}, {"explode"}, {"run"}} {
		if code, _, errs := replay(args...); code != exitUsage || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

func TestJSON(t *testing.T) {
	code, out, _ := replay("run", "--json", "-", lib)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Runs []struct {
			Policy, Verdict string
			Match           bool
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Runs) != 20 { // 4 modes x 5 policies
		t.Fatalf("%d runs", len(doc.Runs))
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := replay("--help")
	if code != exitOK || !strings.Contains(out, "ref-v1.11") || !strings.Contains(out, "Exit status") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}
