package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	FailedBuild string
}

// modulePrefix is cut from package paths to keep the summary's lines short.
const modulePrefix = "github.com/vpccni/vpccni/"

// runGoTest runs args, keeps its stdout (the JSON stream) in out, shows a
// person what plain `go test` shows, and returns args' exit status.
func runGoTest(out string, args []string) int {
	f, err := os.Create(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 1
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 1
	}
	// Ctrl-C reaches go test too (same process group): wait for it to
	// stop and keep what it wrote. Caught, not ignored, so that the child
	// does not inherit an ignored SIGINT.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt, syscall.SIGTERM)
	filter(stdout, f, os.Stdout)
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 1
	}
	return 0
}

// filter copies the JSON stream r to raw and writes to human the package
// lines, build errors, and the output of every failed or skipped test.
func filter(r io.Reader, raw, human io.Writer) {
	br := bufio.NewReader(r)
	held := map[string][]string{} // output of running tests, by package and test
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			io.WriteString(raw, line)
			var e event
			if json.Unmarshal([]byte(line), &e) != nil {
				io.WriteString(human, line) // not JSON: the go command's own words
			} else {
				key := e.Package + "\x00" + e.Test
				switch {
				case e.Action == "build-output":
					io.WriteString(human, e.Output)
				case e.Test == "" && e.Action == "output":
					if e.Output != "PASS\n" {
						io.WriteString(human, e.Output)
					}
				case e.Test == "":
				case e.Action == "output":
					held[key] = append(held[key], e.Output)
				case e.Action == "fail" || e.Action == "skip":
					for _, o := range held[key] {
						if !strings.HasPrefix(o, "=== ") {
							io.WriteString(human, o)
						}
					}
					delete(held, key)
				case e.Action == "pass":
					delete(held, key)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// parseGoTest counts the tests (subtests too) of a `go test -json` stream:
// a skip's reason is what the test logged before it skipped. A package
// that failed with no failed test (a build error, a crash outside a test,
// a timeout) counts as one failure.
func parseGoTest(s *Suite, b []byte) error {
	type result struct {
		action string
		output []string
	}
	tests := map[string]*result{}
	var order []string
	pkgFailed := map[string]string{}
	var pkgs []string
	for _, line := range strings.Split(string(b), "\n") {
		var e event
		if strings.TrimSpace(line) == "" || json.Unmarshal([]byte(line), &e) != nil || e.Package == "" {
			continue
		}
		pkg := strings.TrimPrefix(e.Package, modulePrefix)
		if e.Test == "" {
			if e.Action == "fail" {
				pkgs = append(pkgs, pkg)
				pkgFailed[pkg] = "package failed (see its output above)"
				if e.FailedBuild != "" {
					pkgFailed[pkg] = "build failed: " + e.FailedBuild
				}
			}
			continue
		}
		name := pkg + " " + e.Test
		r := tests[name]
		if r == nil {
			r = &result{}
			tests[name] = r
			order = append(order, name)
		}
		switch e.Action {
		case "output":
			if o := strings.TrimSpace(e.Output); !strings.HasPrefix(o, "=== ") && !strings.HasPrefix(o, "--- ") {
				r.output = append(r.output, o)
			}
		case "pass", "fail", "skip":
			r.action = e.Action
		}
	}
	failedIn := map[string]bool{}
	for _, name := range order {
		r := tests[name]
		switch r.action {
		case "pass":
			s.pass()
		case "skip":
			s.skip(name, strings.Join(r.output, "\n"))
		case "fail":
			s.fail(name, strings.Join(r.output, "\n"))
			failedIn[strings.Fields(name)[0]] = true
		}
		// A test with no result was cut short: its package's failure
		// (a panic, a timeout) says why.
	}
	for _, pkg := range pkgs {
		if !failedIn[pkg] {
			s.fail(pkg, pkgFailed[pkg])
		}
	}
	if len(order) == 0 && len(pkgs) == 0 && !strings.Contains(string(b), `"Action"`) {
		return errors.New("no go test events in the report")
	}
	return nil
}
