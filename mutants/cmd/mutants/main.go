// Command mutants applies each hand-chosen mutant of a list file (see
// mutants/hand.txt) to a temporary copy of the tree, runs the test packages
// the list names for it, and reports which mutants the tests killed.
//
//	go run ./mutants/cmd/mutants [-list mutants/hand.txt] [-j 2] [-only ID,ID]
//
// The working tree is never edited: each mutant gets its own copy (without
// .git, bin/ and test binaries). A mutant is killed when a test fails; a
// mutant that does not compile, or whose original snippet is not found
// exactly once, is an error of the list. Exit status: 0 when every mutant
// was killed, 1 when one survived or the list is wrong, 2 for bad flags.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

type mutant struct {
	ID, Name, File string
	Pkgs           []string
	Args           []string // extra go test args (e.g. -run)
	Orig, Repl     string
	Line           int
}

type result struct {
	m       mutant
	status  string // killed, survived, error
	killers []string
	detail  string
	took    time.Duration
}

func main() {
	list := flag.String("list", "mutants/hand.txt", "mutant list file")
	jobs := flag.Int("j", 2, "mutants run in parallel")
	only := flag.String("only", "", "comma-separated mutant IDs to run (default all)")
	timeout := flag.Duration("timeout", 4*time.Minute, "go test -timeout per package run")
	verbose := flag.Bool("v", false, "print the failing test output of each killed mutant")
	grem := flag.String("gremlins", "", "instead of the list: run gremlins over these comma-separated packages (in a copy of the tree)")
	gremVersion := flag.String("gremlins-version", "v0.6.0", "gremlins version (go run github.com/go-gremlins/gremlins/cmd/gremlins@VERSION)")
	gremOut := flag.String("gremlins-out", "bin/mutants", "directory for gremlins' JSON reports")
	flag.Parse()
	if *grem != "" {
		os.Exit(runGremlins(strings.Split(*grem, ","), *gremVersion, *gremOut, *jobs, *timeout))
	}
	ms, err := parse(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	if *only != "" {
		want := map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			want[strings.TrimSpace(id)] = true
		}
		var sel []mutant
		for _, m := range ms {
			if want[m.ID] {
				sel = append(sel, m)
			}
		}
		ms = sel
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	// Each worker copies the tree for each of its mutants to the same
	// path: go's build cache keys a package by its directory as well as
	// its files, so at a fixed path only the mutated package and those
	// importing it are compiled again, not the whole module each time.
	base, err := os.MkdirTemp("", "vpccni-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	workers := make(chan string, max(1, *jobs))
	for k := range max(1, *jobs) {
		workers <- filepath.Join(base, fmt.Sprintf("w%d", k))
	}
	start := time.Now()
	results := make([]result, len(ms))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := <-workers
			defer func() { workers <- dir }()
			t0 := time.Now()
			r := run(root, dir, m, *timeout)
			r.took = time.Since(t0)
			results[i] = r
			mu.Lock()
			fmt.Printf("%-4s %-9s %-48s %6.1fs %s\n", m.ID, strings.ToUpper(r.status), m.Name, r.took.Seconds(), strings.Join(r.killers, " "))
			if r.status != "killed" || *verbose {
				fmt.Println(indent(r.detail))
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	code := summary(results, time.Since(start))
	os.RemoveAll(base)
	os.Exit(code)
}

func indent(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = append(lines[:40], "…")
	}
	return "      " + strings.Join(lines, "\n      ")
}

func summary(rs []result, took time.Duration) int {
	type tally struct{ killed, survived, errs int }
	per := map[string]*tally{}
	var tot tally
	for _, r := range rs {
		pkg := filepath.Dir(r.m.File)
		if per[pkg] == nil {
			per[pkg] = &tally{}
		}
		t := per[pkg]
		switch r.status {
		case "killed":
			t.killed++
			tot.killed++
		case "survived":
			t.survived++
			tot.survived++
		default:
			t.errs++
			tot.errs++
		}
	}
	pkgs := make([]string, 0, len(per))
	for p := range per {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	fmt.Println()
	fmt.Printf("%-28s %7s %9s %6s\n", "package (mutated)", "killed", "survived", "error")
	for _, p := range pkgs {
		t := per[p]
		fmt.Printf("%-28s %7d %9d %6d\n", p, t.killed, t.survived, t.errs)
	}
	n := len(rs)
	score := 0.0
	if n > 0 {
		score = 100 * float64(tot.killed) / float64(n)
	}
	fmt.Printf("%-28s %7d %9d %6d   score %.1f%% of %d in %s\n", "TOTAL", tot.killed, tot.survived, tot.errs, score, n, took.Round(time.Second))
	var bad []string
	for _, r := range rs {
		if r.status != "killed" {
			bad = append(bad, r.m.ID+" ("+r.status+")")
		}
	}
	if len(bad) > 0 {
		fmt.Println("not killed:", strings.Join(bad, ", "))
		return 1
	}
	return 0
}

// run tries one mutant in a fresh copy of the tree at dir.
func run(root, dir string, m mutant, timeout time.Duration) result {
	r := result{m: m}
	if err := os.RemoveAll(dir); err != nil {
		r.status, r.detail = "error", err.Error()
		return r
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		r.status, r.detail = "error", err.Error()
		return r
	}
	if err := copyTree(root, dir); err != nil {
		r.status, r.detail = "error", "copy: "+err.Error()
		return r
	}
	path := filepath.Join(dir, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		r.status, r.detail = "error", err.Error()
		return r
	}
	if n := strings.Count(string(src), m.Orig); n != 1 {
		r.status, r.detail = "error", fmt.Sprintf("%s: original snippet found %d times (want exactly 1)", m.File, n)
		return r
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), m.Orig, m.Repl, 1)), 0o644); err != nil {
		r.status, r.detail = "error", err.Error()
		return r
	}
	// TMPDIR inside the copy (a name go's package patterns skip): a
	// mutant that hangs a test is killed by the timeout before its
	// t.TempDir cleanups run, and go's own work dir is left too; they go
	// when the copy does.
	// Both traversable by anyone, as /tmp is: a test that runs a copy
	// of its binary as nobody (ipamd's socket access check) must reach
	// it, or that test fails on every mutant of its package and kills
	// them all whatever they change.
	tmp := filepath.Join(dir, ".tmp")
	if err := traversable(dir, tmp); err != nil {
		r.status, r.detail = "error", err.Error()
		return r
	}
	// The mutant must compile, tests included (go vet type-checks them).
	if out, err := goCmd(dir, tmp, timeout, "vet", "./"+filepath.Dir(m.File)); err != nil {
		r.status, r.detail = "error", "mutant does not compile:\n"+out
		return r
	}
	var details []string
	for _, p := range m.Pkgs {
		// The package first: go test reads flags after it too, and hands
		// the ones it does not know (-ginkgo.focus=…) to the test binary.
		args := append([]string{"test", "-count=1", "-timeout", timeout.String(), p}, m.Args...)
		out, err := goCmd(dir, tmp, timeout+time.Minute, args...)
		if err != nil {
			if strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") {
				r.status, r.detail = "error", "tests do not build against the mutant:\n"+out
				return r
			}
			r.killers = append(r.killers, p+": "+failingTests(out))
			details = append(details, lastLines(out, 25))
			break // one failing package is enough
		}
	}
	if len(r.killers) > 0 {
		r.status, r.detail = "killed", strings.Join(details, "\n")
	} else {
		r.status = "survived"
		r.detail = "no test failed in " + strings.Join(m.Pkgs, " ")
	}
	return r
}

func failingTests(out string) string {
	var names []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		var name string
		switch {
		case strings.HasPrefix(l, "--- FAIL: "):
			name = strings.Fields(strings.TrimPrefix(l, "--- FAIL: "))[0]
		case strings.HasPrefix(l, "[FAIL] "):
			name = strings.TrimPrefix(l, "[FAIL] ")
			if i := strings.Index(name, " ["); i > 0 {
				name = name[:i]
			}
			name = "ginkgo:" + strings.ReplaceAll(name, " ", "_")
		case strings.HasPrefix(l, "panic: "):
			name = "panic"
		}
		// Keep top-level names only (subtests repeat their parent).
		if name != "" && !seen[name] {
			top := strings.SplitN(name, "/", 2)[0]
			if name != top && seen[top] {
				continue
			}
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) > 4 {
		names = append(names[:4], fmt.Sprintf("+%d", len(names)-4))
	}
	if len(names) == 0 {
		return "(failed)"
	}
	return strings.Join(names, ",")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// traversable makes tmp and gives it and dir mode 0711, whatever the
// umask.
func traversable(dir, tmp string) error {
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return err
	}
	for _, d := range []string{dir, tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// goCmd runs go in dir, with TMPDIR set when tmp is not empty.
func goCmd(dir, tmp string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// VPCCNI_MUTANT_RUN: a suite that can stop at its first finding
	// (the explorer's budget) does, since a mutant only needs one.
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "VPCCNI_MUTANT_RUN=1")
	if tmp != "" {
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// copyTree copies the source tree (no .git, bin/, *.test, mutants' output).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "explore-out":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(rel, ".test") || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// parse reads the list. Each mutant:
//
//	### ID short-name
//	file: path/to/file.go
//	pkgs: ./pkg/a ./pkg/b        (run in order; the first failure kills)
//	args: -run TestX             (optional extra go test flags)
//	<<<
//	original lines (exact, tabs included)
//	===
//	replacement lines
//	>>>
//
// Lines outside a mutant starting with # are comments.
func parse(path string) ([]mutant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	var ms []mutant
	var cur *mutant
	var orig, repl []string
	state := 0 // 0 header, 1 orig, 2 repl
	ids := map[string]bool{}
	for i, l := range lines {
		switch {
		case state == 1 && l == "===":
			state = 2
		case state == 1:
			orig = append(orig, l)
		case state == 2 && l == ">>>":
			cur.Orig, cur.Repl = strings.Join(orig, "\n"), strings.Join(repl, "\n")
			if cur.File == "" || len(cur.Pkgs) == 0 || cur.Orig == "" {
				return nil, fmt.Errorf("%s:%d: mutant %s needs file, pkgs and an original snippet", path, cur.Line, cur.ID)
			}
			ms = append(ms, *cur)
			cur, orig, repl, state = nil, nil, nil, 0
		case state == 2:
			repl = append(repl, l)
		case strings.HasPrefix(l, "### "):
			f := strings.Fields(strings.TrimPrefix(l, "### "))
			if len(f) < 2 {
				return nil, fmt.Errorf("%s:%d: want '### ID name'", path, i+1)
			}
			if ids[f[0]] {
				return nil, fmt.Errorf("%s:%d: duplicate mutant id %s", path, i+1, f[0])
			}
			ids[f[0]] = true
			cur = &mutant{ID: f[0], Name: strings.Join(f[1:], " "), Line: i + 1}
		case cur != nil && strings.HasPrefix(l, "file:"):
			cur.File = strings.TrimSpace(strings.TrimPrefix(l, "file:"))
		case cur != nil && strings.HasPrefix(l, "pkgs:"):
			cur.Pkgs = strings.Fields(strings.TrimPrefix(l, "pkgs:"))
		case cur != nil && strings.HasPrefix(l, "args:"):
			cur.Args = strings.Fields(strings.TrimPrefix(l, "args:"))
		case cur != nil && l == "<<<":
			state = 1
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#"):
		default:
			return nil, fmt.Errorf("%s:%d: unexpected line %q", path, i+1, l)
		}
	}
	if state != 0 || cur != nil {
		return nil, fmt.Errorf("%s: last mutant is not closed with >>>", path)
	}
	return ms, nil
}

// gremlinsReport is the part of gremlins' -o JSON this tool reads.
type gremlinsReport struct {
	Files []struct {
		FileName  string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
	Efficacy float64 `json:"test_efficacy"`
	Coverage float64 `json:"mutations_coverage"`
	Elapsed  float64 `json:"elapsed_time"`
}

// runGremlins runs gremlins over each package, one after the other (each
// run uses `workers` test processes), in one copy of the tree: gremlins
// rewrites the files it mutates, and the working tree is never touched.
func runGremlins(pkgs []string, version, outDir string, workers int, timeout time.Duration) int {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	outDir, _ = filepath.Abs(outDir)
	dir, err := os.MkdirTemp("", "vpccni-gremlins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	if err := copyTree(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "mutants: copy:", err)
		return 2
	}
	start := time.Now()
	type row struct {
		pkg                                           string
		killed, lived, timedOut, notCovered, bad, sub int
		efficacy                                      float64
		took                                          time.Duration
		lives                                         []string
		err                                           string
	}
	var rows []row
	for _, p := range pkgs {
		p = strings.TrimSpace(p)
		t0 := time.Now()
		out := filepath.Join(outDir, "gremlins-"+strings.NewReplacer("/", "_", ".", "").Replace(strings.Trim(p, "./"))+".json")
		fmt.Printf("== gremlins %s (%s)\n", p, version)
		// Gremlins mutates every package below the path it is given; the
		// packages here are leaves, or their sub-packages need root.
		txt, err := goCmd(dir, "", 30*time.Minute, "run", "github.com/go-gremlins/gremlins/cmd/gremlins@"+version, "unleash",
			"--workers", fmt.Sprint(max(1, workers)), "--timeout-coefficient", "3", "-o", out, p)
		r := row{pkg: p, took: time.Since(t0)}
		data, rerr := os.ReadFile(out)
		var rep gremlinsReport
		if rerr == nil {
			rerr = json.Unmarshal(data, &rep)
		}
		if err != nil || rerr != nil {
			r.err = fmt.Sprint(err, " ", rerr, "\n", lastLines(txt, 20))
			rows = append(rows, r)
			continue
		}
		for _, f := range rep.Files {
			if strings.Contains(f.FileName, "/") {
				// Gremlins also mutates the packages below the path
				// (./plugin takes in plugin/driver): count only the
				// package's own files.
				r.sub += len(f.Mutations)
				continue
			}
			for _, m := range f.Mutations {
				switch m.Status {
				case "KILLED":
					r.killed++
				case "LIVED":
					r.lived++
					r.lives = append(r.lives, fmt.Sprintf("%s/%s:%d:%d %s", strings.Trim(p, "./"), f.FileName, m.Line, m.Column, m.Type))
				case "TIMED OUT":
					r.timedOut++
				case "NOT COVERED":
					r.notCovered++
				default:
					r.bad++
				}
			}
		}
		if r.killed+r.lived > 0 {
			r.efficacy = 100 * float64(r.killed) / float64(r.killed+r.lived)
		}
		sort.Strings(r.lives)
		rows = append(rows, r)
	}
	fmt.Println()
	fmt.Printf("%-22s %7s %6s %9s %11s %9s %8s\n", "package", "killed", "lived", "timed-out", "not-covered", "efficacy", "time")
	failed := false
	for _, r := range rows {
		if r.err != "" {
			failed = true
			fmt.Printf("%-22s gremlins failed: %s\n", r.pkg, r.err)
			continue
		}
		fmt.Printf("%-22s %7d %6d %9d %11d %8.1f%% %8s", r.pkg, r.killed, r.lived, r.timedOut, r.notCovered, r.efficacy, r.took.Round(time.Second))
		if r.sub > 0 {
			fmt.Printf("  (+%d mutants of sub-packages, not counted)", r.sub)
		}
		fmt.Println()
	}
	fmt.Printf("gremlins total time %s; reports in %s\n", time.Since(start).Round(time.Second), outDir)
	for _, r := range rows {
		if len(r.lives) > 0 {
			fmt.Printf("\nsurvivors (LIVED) in %s:\n  %s\n", r.pkg, strings.Join(r.lives, "\n  "))
		}
	}
	if failed {
		return 1
	}
	return 0
}
