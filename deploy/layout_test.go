package deploy

// The shipped binaries link no test support: nothing under
// internal/testsupport/ or scenarios/ is in what the node images carry.

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is vpccni's module path.
const module = "github.com/vpccni/vpccni"

// testOnly are the trees only tests, the harness and the scenario
// explorer may import (module-relative, with the trailing slash).
var testOnly = []string{"internal/testsupport/", "scenarios/"}

// shippedPkgs are the main packages the Makefile's build target and the
// Dockerfile's build stage build (./dir arguments of go build), sorted,
// without repeats.
func shippedPkgs(makefile string, d *dockerfile) []string {
	var out []string
	add := func(text string) {
		fields := strings.Fields(text)
		for i, f := range fields {
			if f != "build" || i == 0 || !strings.HasSuffix(fields[i-1], "go") && fields[i-1] != "$(GO)" {
				continue
			}
			for _, arg := range fields[i+1:] {
				if arg == "&&" || arg == ";" {
					break
				}
				if strings.HasPrefix(arg, "./") {
					out = append(out, arg)
				}
			}
		}
	}
	add(recipe(makefile, "build"))
	for _, s := range d.stages {
		if s.name == "build" {
			add(strings.Join(s.instructions, "\n"))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// testOnlyDeps are the packages of deps (import paths) under a test-only
// tree.
func testOnlyDeps(deps []string) []string {
	var bad []string
	for _, p := range deps {
		rel, ok := strings.CutPrefix(p, module+"/")
		if !ok {
			continue
		}
		for _, t := range testOnly {
			if strings.HasPrefix(rel+"/", t) {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

// TestShippedBinariesLinkNoTestSupport runs go list -deps on every shipped
// binary, built as the image builds it (static, linux), and fails when
// one depends on a package under internal/testsupport/ or scenarios/.
func TestShippedBinariesLinkNoTestSupport(t *testing.T) {
	b, err := parse(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := shippedPkgs(b.makefile, b.dockerfile)
	for _, want := range []string{pluginPkg, ipamdPkg, nodePkg, auditPkg} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("found the shipped binaries %v in the Makefile's build target and the Dockerfile's build stage; %s is missing (the reader of either is out of date)", pkgs, want)
		}
	}
	for _, pkg := range pkgs {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, msg)
		}
		if bad := testOnlyDeps(strings.Fields(string(out))); len(bad) > 0 {
			t.Errorf("%s ships, but depends on test-only packages (under %s): %s", pkg, strings.Join(testOnly, " or "), strings.Join(bad, ", "))
		}
	}
}

// TestTestOnlyDeps: the filter sees both trees, and only them.
func TestTestOnlyDeps(t *testing.T) {
	deps := []string{
		"fmt",
		module + "/internal/failpoint",
		module + "/internal/testsupport/testns",
		module + "/scenarios/engine",
		module + "/scenariosx",
		"example.com/other/scenarios/engine",
	}
	got := testOnlyDeps(deps)
	want := []string{module + "/internal/testsupport/testns", module + "/scenarios/engine"}
	if !slices.Equal(got, want) {
		t.Fatalf("testOnlyDeps = %v, want %v", got, want)
	}
	if s := fmt.Sprint(shippedPkgs("build:\n\t$(GO) build -o x ./a/cmd/a\n\tgo build -o y ./b\n", &dockerfile{})); s != "[./a/cmd/a ./b]" {
		t.Fatalf("shippedPkgs = %s", s)
	}
}
