package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/scenarios/spec"
)

// page reads a page replay wrote and checks the output names it last.
func page(t *testing.T, path, stdout string) string {
	t.Helper()
	ls := lines(stdout)
	if want := "report: " + path + " (one page; open it in a browser)"; ls[len(ls)-1] != want {
		t.Errorf("last line %q, want %q", ls[len(ls)-1], want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunHTML: replay run --html draws the headline under ref-v1.11 with
// web-1's two leaked rules and web-2's misroute, and under vpccni's flow
// with none.
func TestRunHTML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "r.html")
	code, out, errs := replay("run", "--quiet", "--mode", "ipv4", "--html", path, headline)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	html := page(t, path, out)
	ref := html[strings.Index(html, `data-policy="ref-v1.11" data-verdict="LEAK"`):]
	ref = ref[:strings.Index(ref, "</section>")]
	if n := strings.Count(ref, `class="obj leaked"`); n != 2 {
		t.Errorf("ref-v1.11's cell draws %d leaked objects, want 2", n)
	}
	if !strings.Contains(ref, `class="misroute"`) {
		t.Error("ref-v1.11's cell marks no misroute")
	}
	def := html[strings.Index(html, `data-policy="default" data-verdict="clean"`):]
	def = def[:strings.Index(def, "</section>")]
	if strings.Contains(def, "leaked") || strings.Contains(def, `class="misroute"`) {
		t.Error("vpccni's clean cell is drawn with a leak or a misroute")
	}
}

// TestHTMLBadPath: a page that cannot be written stops the command before
// anything runs (exit 2, nothing on stdout).
func TestHTMLBadPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	bad := filepath.Join(file, "r.html") // under a file: no such directory can be made
	tmpl := filepath.Join(t.TempDir(), "t.yaml")
	os.WriteFile(tmpl, []byte(small), 0o644)
	for _, args := range [][]string{
		{"run", "--html", bad, headline},
		{"journal", "--html", bad, realJournal},
		{"explore", "--html", bad, "--policy", "default", tmpl},
		{"explore", "--random", "--seed", "1", "--schedules", "1", "--html", bad},
	} {
		code, out, errs := replay(args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, "--html "+bad) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	if code, _, errs := replay("explore", "--html", filepath.Join(t.TempDir(), "x.html"), "--no-shrink", tmpl); code != exitUsage || !strings.Contains(errs, "--no-shrink") {
		t.Errorf("--html with --no-shrink: exit %d, %q", code, errs)
	}
}

// TestJournalHTML: replay journal --html draws the real-kernel journal,
// clean, a lane per pod.
func TestJournalHTML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.html")
	code, out, errs := replay("journal", "--quiet", "--html", path, realJournal)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	html := page(t, path, out)
	if !strings.Contains(html, `data-mode="journal" data-policy="default" data-verdict="clean"`) || !strings.Contains(html, `data-pod="default/web-0"`) {
		t.Error("the journal's cell is not drawn clean with web-0's lane")
	}
}

// TestExploreHTML: replay explore --html draws the matrix as a heat map
// whose failing cell links to a counterexample replayed as a timeline,
// itself linking to the file written.
func TestExploreHTML(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "t.yaml")
	os.WriteFile(tmpl, []byte(small), 0o644)
	path := filepath.Join(dir, "e.html")
	code, out, errs := replay("explore", "--policy", "default,ref-current", "--action", "error", "--memory", "kept",
		"--out", filepath.Join(dir, "out"), "--html", path, tmpl)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	html := page(t, path, out)
	if !strings.Contains(html, `<table class="heat">`) || !strings.Contains(html, "<th>ref-current</th>") {
		t.Fatal("no heat map with ref-current's row")
	}
	if !strings.Contains(html, `class="level0"`) || !strings.Contains(html, `href="#cell-example-`) {
		t.Error("the heat map has no clean cell or no link to a counterexample's timeline")
	}
	if !strings.Contains(html, `href="out/`) || !strings.Contains(html, `<section class="cell findings" id="cell-example-`) {
		t.Error("no counterexample file linked (relative to the page) or no counterexample's cell")
	}
}

// TestExamplePageSaysWhatItCouldNotReplay: a counterexample the page
// cannot replay is listed with why, and the error is returned for the
// text output, not dropped.
func TestExamplePageSaysWhatItCouldNotReplay(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "e.html"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := spec.Parse([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	p := newExplorePage(f, "t")
	err = p.add("LEAK", "x", "out/x.yaml", s, "ipv4", "ref-v1.11") // the file expects nothing of ref-v1.11
	if err == nil {
		t.Fatal("a counterexample that cannot run in its mode was added without an error")
	}
	if e := p.page.Examples[0]; e.CellID != "" || !strings.Contains(e.Schedule, "not replayed for this page") {
		t.Errorf("example %+v does not say it was not replayed", e)
	}
}
