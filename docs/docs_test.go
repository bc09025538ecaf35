package docs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// repo is the repository's root, seen from this package's directory.
var repo = os.DirFS("..")

// markdownFiles are README.md and docs/*.md.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(repo, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, files...)
}

func TestLinksResolve(t *testing.T) {
	for _, f := range markdownFiles(t) {
		for _, p := range CheckLinks(repo, f) {
			t.Error(p)
		}
	}
}

func TestCitedDocsExist(t *testing.T) {
	for _, p := range CheckCitations(repo) {
		t.Error(p)
	}
}

func TestReadmeCommandsResolve(t *testing.T) {
	mk, err := fs.ReadFile(repo, "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	cmds := Commands{MakeTargets: MakeTargets(mk), ReplaySubcommand: replaySubcommand(t)}
	for _, p := range CheckCommands(repo, "README.md", cmds) {
		t.Error(p)
	}
}

// replaySubcommand asks the replay command itself whether it has a
// subcommand: `replay SUB --help` exits 0 for each of its subcommands and
// 2 ("unknown command") for anything else. The command dispatches with a
// switch and its usage text is prose, so running it is what stays true
// when either changes. It is built once per test binary, into a
// temporary directory TestMain removes.
func replaySubcommand(t *testing.T) func(string) bool {
	t.Helper()
	replayOnce.Do(func() {
		replayBin = filepath.Join(tmpDir, "replay")
		build := exec.Command(goTool(), "build", "-o", replayBin, "./scenarios/cmd/replay")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			replayErr = fmt.Errorf("building replay: %v\n%s", err, out)
		}
	})
	if replayErr != nil {
		t.Fatal(replayErr)
	}
	var mu sync.Mutex
	known := map[string]bool{}
	return func(sub string) bool {
		mu.Lock()
		defer mu.Unlock()
		if ok, seen := known[sub]; seen {
			return ok
		}
		err := exec.Command(replayBin, sub, "--help").Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running replay %s --help: %v", sub, err)
		}
		known[sub] = err == nil
		return known[sub]
	}
}

var (
	tmpDir     string
	replayOnce sync.Once
	replayBin  string
	replayErr  error
)

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "vpccni-docs-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// goTool is the go command running this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// The replay check must be able to say no, or the README check proves
// nothing about subcommands.
func TestReplaySubcommandCheckSaysNo(t *testing.T) {
	has := replaySubcommand(t)
	for _, sub := range []string{"run", "explore", "journal", "failpoints"} {
		if !has(sub) {
			t.Errorf("replay %s is not recognised as a subcommand", sub)
		}
	}
	if has("no-such-subcommand") {
		t.Error("replay no-such-subcommand is recognised as a subcommand")
	}
}

// d spells the docs folder in the fixtures below without writing a
// citation this test's own check would read in this file.
const d = "docs" + "/"

// TestCheckerCatchesABrokenReadme feeds the checker a small repository
// whose README has a link to a missing file, a link to a missing
// heading, a make target and a replay subcommand that do not exist,
// and file arguments that match nothing, and whose code cites a missing
// doc and a missing anchor. Every mistake must be reported, and nothing
// that is right.
func TestCheckerCatchesABrokenReadme(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# Demo\n\n" +
			"```sh\n" +
			"make replay   # fine\n" +
			"make nosuchtarget\n" +
			"go run ./scenarios/cmd/replay run scenarios/library/*.yaml\n" +
			"go run ./scenarios/cmd/replay run scenarios/library/gone.yaml\n" +
			"go run ./scenarios/cmd/replay bogus scenarios/library/a.yaml\n" +
			"go run ./scenarios/cmd/replay journal --quiet scenarios/journals/*.jsonl\n" +
			"go test ./nosuchpkg/\n" +
			"```\n\n" +
			"Good: [guide](" + d + "guide.md), [section](" + d + "guide.md#the-delete-flow), [top](#demo).\n" +
			"Broken: [gone](" + d + "missing.md), [no heading](" + d + "guide.md#no-such-heading), [self](#nowhere).\n" +
			"Not followed: [site](https://example.org/x.md), `[code](" + d + "missing-in-code.md)`.\n" +
			"Track record: `replay run scenarios/library/a.yaml` and `replay run scenarios/library/b.yaml`.\n")},
		d + "guide.md": {Data: []byte("# Guide\n\n## The delete flow\n\nBack to the [front page](../README.md#demo) and [nowhere](../README.md#gone).\n" +
			"```sh\n# A heading in a code block is no anchor\n```\n")},
		"Makefile":                   {Data: []byte("GO ?= go\n.PHONY: replay\nreplay:\n\t$(GO) run ./scenarios/cmd/replay run x\nX := y\n")},
		"scenarios/library/a.yaml":   {Data: []byte("# cites " + d + "guide.md#the-delete-flow, which is fine\n")},
		"scenarios/cmd/replay/x.go":  {Data: []byte("package main\n")},
		"plugin/del.go":              {Data: []byte("package plugin\n\n// See " + d + "guide.md#no-such-section and " + d + "gone.md.\n// https://example.org/" + d + "x.md is not a citation.\n")},
		"bin/generated.go":           {Data: []byte("// " + d + "ignored.md: bin/ is skipped\n")},
		"scenarios/library/note.txt": {Data: []byte(d + "not-read.md\n")},
	}
	cmds := Commands{
		MakeTargets:      MakeTargets(fsys["Makefile"].Data),
		ReplaySubcommand: func(sub string) bool { return sub == "run" || sub == "journal" },
	}

	var got []string
	got = append(got, CheckLinks(fsys, "README.md")...)
	got = append(got, CheckLinks(fsys, d+"guide.md")...)
	got = append(got, CheckCitations(fsys)...)
	got = append(got, CheckCommands(fsys, "README.md", cmds)...)
	all := strings.Join(got, "\n")

	want := []string{
		`README.md:14: link "` + d + `missing.md": ` + d + `missing.md does not exist`,
		`README.md:14: link "` + d + `guide.md#no-such-heading": no heading of ` + d + `guide.md has the anchor #no-such-heading`,
		`README.md:14: link "#nowhere": no heading of README.md has the anchor #nowhere`,
		d + `guide.md:5: link "../README.md#gone": no heading of README.md has the anchor #gone`,
		`plugin/del.go:3: cites ` + d + `guide.md#no-such-section: no heading`,
		`plugin/del.go:3: cites ` + d + `gone.md, which does not exist`,
		`README.md:5: "make nosuchtarget": make has no target "nosuchtarget"`,
		`README.md:7: "go run ./scenarios/cmd/replay run scenarios/library/gone.yaml": scenarios/library/gone.yaml does not exist`,
		`README.md:8: "go run ./scenarios/cmd/replay bogus scenarios/library/a.yaml": replay has no subcommand "bogus"`,
		`README.md:9: "go run ./scenarios/cmd/replay journal --quiet scenarios/journals/*.jsonl": scenarios/journals/*.jsonl matches no file`,
		`README.md:10: "go test ./nosuchpkg/": no package directory ./nosuchpkg/`,
		`README.md:16: "replay run scenarios/library/b.yaml": scenarios/library/b.yaml does not exist`,
	}
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("not reported: %s", w)
		}
	}
	// Nothing else: the good links, the glob that matches, the make
	// target that exists, the link in a code span, the URL, bin/ and the
	// .txt file are not reported.
	if len(got) != len(want) {
		t.Errorf("%d problems reported, want %d:\n%s", len(got), len(want), all)
	}
}

// TestSlug pins GitHub's anchor rules on the kinds of heading these docs
// use.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The delete flow":                    "the-delete-flow",
		"Introspection, metrics and health":  "introspection-metrics-and-health",
		"What `go test ./deploy/` checks":    "what-go-test-deploy-checks",
		"The recorded #2048":                 "the-recorded-2048",
		"Issue 2048":                         "issue-2048",
		"Per-ENI host state":                 "per-eni-host-state",
		"C++ & Go":                           "c--go",
		"The reference's DEL":                "the-references-del",
		"A [link](x.md) and **bold**":        "a-link-and-bold",
		"WARM_IP_TARGET and _emphasis_":      "warm_ip_target-and-emphasis",
		"Ünïcode stays":                      "ünïcode-stays",
		"  Trailing hashes are dropped  ":    "trailing-hashes-are-dropped",
		"make test: what it runs (and why)?": "make-test-what-it-runs-and-why",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := Anchors([]byte("# A\n## Twice\n## Twice\n```\n# not a heading\n```\n### Closed ###\n"))
	for _, want := range []string{"a", "twice", "twice-1", "closed"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a heading inside a code block has an anchor")
	}
}

func TestMakeTargets(t *testing.T) {
	got := MakeTargets([]byte(".PHONY: a b\nall: build\nbuild:\n\tgo build\nX := 1\nY ?= 2\nkind-up kind-down:\n$(BIN)/x:\n\t:\n"))
	for _, want := range []string{"all", "build", "kind-up", "kind-down"} {
		if !got[want] {
			t.Errorf("no target %q in %v", want, got)
		}
	}
	for _, not := range []string{".PHONY", "X", "Y", "a"} {
		if got[not] {
			t.Errorf("%q taken for a target", not)
		}
	}
}

func TestShellCommands(t *testing.T) {
	got := shellCommands([]line{
		{1, "make a && make b; make c   # make d"},
		{2, "echo '#x' |"},
		{3, "  make e \\"},
		{4, "  f"},
		{5, "cmd >/dev/null 2>&1 &"},
	})
	var texts []string
	for _, c := range got {
		texts = append(texts, c.text)
	}
	want := "make a|make b|make c|echo '#x'|make e f|cmd >/dev/null 2>&1"
	if strings.Join(texts, "|") != want {
		t.Errorf("commands %q, want %q", strings.Join(texts, "|"), want)
	}
}
