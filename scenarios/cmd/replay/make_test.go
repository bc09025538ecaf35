package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is where the Makefile's paths start.
const repoRoot = "../../.."

// replayRecipe is the command line of `make replay`: its one recipe line,
// the replay arguments with the globs expanded, REPLAY_FLAGS empty and the
// page written to html.
func replayRecipe(t *testing.T, html string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "replay:"):
			in = true
		case in && strings.HasPrefix(l, "\t"):
			recipe = append(recipe, strings.TrimSpace(l))
		case in:
			in = false
		}
	}
	// One command: the journals' report is part of the scenarios', so the
	// output ends on the table and the total line.
	const prefix = "$(GO) run ./scenarios/cmd/replay run $(REPLAY_FLAGS) --html $(BIN)/replay.html "
	if len(recipe) != 1 || !strings.HasPrefix(recipe[0], prefix) {
		t.Fatalf("make replay's recipe is %q, want one line %q…", recipe, prefix)
	}
	args := []string{"run", "--html", html}
	for _, pat := range strings.Fields(strings.TrimPrefix(recipe[0], prefix)) {
		files, err := filepath.Glob(filepath.Join(repoRoot, pat))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s matches nothing (%v)", pat, err)
		}
		args = append(args, files...)
	}
	return args
}

// TestMakeReplay runs what `make replay` runs: the headline incident
// first, every cell as expected, the journals replayed clean, and the
// output ends on the table and the total line.
func TestMakeReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole library: not in -short")
	}
	page := filepath.Join(t.TempDir(), "bin", "replay.html")
	args := replayRecipe(t, page)
	if !strings.HasSuffix(args[len(args)-1], ".jsonl") {
		t.Fatalf("make replay replays no journal: %q", args)
	}
	code, out, errs := replay(args...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if first := lines(out)[0]; !strings.HasPrefix(first, "=== autoscaler-evicts-aws-node (aws/amazon-vpc-cni-k8s#2048)  mode=ipv4  policy=default") {
		t.Errorf("make replay starts with %q, not the headline", first)
	}
	rows, total := tableRows(t, out)
	// The page is written and its path is the last line.
	if last := lines(out)[len(lines(out))-1]; last != "report: "+page+" (one page; open it in a browser)" {
		t.Errorf("make replay ends on %q, not the page's path", last)
	}
	if fi, err := os.Stat(page); err != nil || fi.Size() == 0 {
		t.Errorf("make replay wrote no page: %v", err)
	}
	if !strings.HasPrefix(rows[0], "autoscaler-evicts-aws-node ") || !strings.Contains(rows[0], " default ") {
		t.Errorf("the table starts with %q, not the headline under default", rows[0])
	}
	// Every line after the header is a row (a cell or a journal), then
	// the total.
	cells, journals := 0, 0
	for _, r := range rows {
		f := strings.Fields(r)
		switch {
		case len(f) >= 6 && f[1] == "journal":
			journals++
		case len(f) >= 6:
			cells++
		default:
			t.Errorf("not a table row: %q", r)
		}
	}
	m := regexp.MustCompile(`^(\d+)/(\d+) cells as expected; vpccni \(default\) clean everywhere(?: but \d+ known-limit cells? \([^)]*\))?; (\d+)/(\d+) journals? replayed clean$`).FindStringSubmatch(total)
	if m == nil || m[1] != m[2] || m[3] != m[4] || m[2] != itoa(cells) || m[4] != itoa(journals) {
		t.Errorf("total line %q for %d cells and %d journals", total, cells, journals)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
