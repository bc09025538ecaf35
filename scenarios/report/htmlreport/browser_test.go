//go:build browser

// The browser suite (make test's html suite): the report opened in a real
// headless Chromium, driven through chromedp. Built only with -tags
// browser, so the unit suite needs no browser.
package htmlreport

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

const headlineFile = "../../library/autoscaler-evicts-aws-node.yaml"

// chromium is the browser's path: $VPCCNI_CHROMIUM, else the first of
// Debian's names on PATH. Missing is a failure, not a skip: the suite
// exists to look at the page.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VPCCNI_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH (nor VPCCNI_CHROMIUM): `make tools` installs Debian's chromium package")
	return ""
}

// outDir is where the pages and screenshots stay for people to look at:
// $VPCCNI_BROWSER_OUT (make's html suite: bin/html), else a temporary
// directory.
func outDir(t *testing.T) string {
	if d := os.Getenv("VPCCNI_BROWSER_OUT"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// incidentPage replays the headline incident in ipv4 under vpccni's flow
// and under ref-v1.11, and writes both cells as one page.
func incidentPage(t *testing.T, path string) {
	t.Helper()
	s, err := spec.Load(headlineFile)
	if err != nil {
		t.Fatal(err)
	}
	p := &Page{Title: "#2048 under vpccni and ref-v1.11"}
	for _, name := range []string{"default", "ref-v1.11"} {
		pol, err := policy.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := engine.Run(s, "ipv4", pol, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p.AddRun(r)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// seen is what the browser saw of a page: console errors and uncaught
// exceptions, and every request that was not for the page itself.
type seen struct {
	errors   []string
	requests []string
}

func (s *seen) listen(ev any) {
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			s.errors = append(s.errors, fmt.Sprintf("console.%s: %d args", e.Type, len(e.Args)))
		}
	case *runtime.EventExceptionThrown:
		s.errors = append(s.errors, "exception: "+e.ExceptionDetails.Text)
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError {
			s.errors = append(s.errors, "log: "+e.Entry.Text)
		}
	case *network.EventRequestWillBeSent:
		if !strings.HasPrefix(e.Request.URL, "file://") && !strings.HasPrefix(e.Request.URL, "data:") {
			s.requests = append(s.requests, e.Request.URL)
		}
	case *network.EventLoadingFailed:
		s.errors = append(s.errors, "load failed: "+e.ErrorText)
	}
}

// open loads path in a fresh tab of browser, runs query and writes a
// full-page screenshot to shot.
func open[T any](t *testing.T, browser context.Context, path, query, shot string) (T, *seen) {
	t.Helper()
	s := &seen{}
	tab, cancel := chromedp.NewContext(browser, chromedp.WithListener(s.listen))
	defer cancel()
	ctx, stop := context.WithTimeout(tab, 60*time.Second)
	defer stop()
	var zero T
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path)); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	// Events of the load arrive on their own goroutine: let them in.
	if err := chromedp.Do(ctx, chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[T](query))
	if err != nil {
		t.Fatalf("query %s: %v", path, err)
		return zero, s
	}
	if shot != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out, s
}

// browserContext starts one headless Chromium for a test. Its profile
// and its own temporary files live in the test's temporary directory, so
// nothing of it outlives the test.
func browserContext(t *testing.T) context.Context {
	tmp := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(filepath.Join(tmp, "profile")),
		chromedp.Env("TMPDIR="+tmp))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	b, cancelB := chromedp.NewContext(alloc)
	t.Cleanup(cancelB)
	if err := chromedp.Do(b); err != nil {
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	return b
}

// shown is what the page shows of the two cells, read from its DOM.
type shown struct {
	Cells          int      `json:"cells"`
	RefVerdict     string   `json:"refVerdict"`
	DefaultVerdict string   `json:"defaultVerdict"`
	Leaked512      int      `json:"leaked512"`
	Leaked1536     int      `json:"leaked1536"`
	LeakTitles     []string `json:"leakTitles"`
	Misroutes      int      `json:"misroutes"`
	MisrouteTitle  string   `json:"misrouteTitle"`
	DefaultLeaked  int      `json:"defaultLeaked"`
	DefaultMisrt   int      `json:"defaultMisroutes"`
	DefaultBars    int      `json:"defaultBars"`
	DefaultLanes   int      `json:"defaultLanes"`
}

const showQuery = `(() => {
  const ref = document.querySelector('section.cell[data-policy="ref-v1.11"]');
  const def = document.querySelector('section.cell[data-policy="default"]');
  const q = (root, sel) => root ? Array.from(root.querySelectorAll(sel)) : [];
  const leaked = (cls) => q(ref, 'rect.obj.leaked[data-pod="default/web-1"][data-class="' + cls + '"]');
  const all = leaked("rule 512").concat(leaked("rule 1536"));
  const mis = q(ref, 'path.misroute[data-pod="default/web-2"]');
  return {
    cells: document.querySelectorAll("section.cell").length,
    refVerdict: ref ? ref.dataset.verdict : "",
    defaultVerdict: def ? def.dataset.verdict : "",
    leaked512: leaked("rule 512").length,
    leaked1536: leaked("rule 1536").length,
    leakTitles: all.map(r => r.textContent),
    misroutes: mis.length,
    misrouteTitle: mis.length ? mis[0].textContent : "",
    defaultLeaked: q(def, ".leaked").length,
    defaultMisroutes: q(def, ".misroute").length,
    defaultBars: q(def, "rect.obj").length,
    defaultLanes: new Set(q(def, "rect.obj").map(r => r.dataset.pod)).size,
  };
})()`

// problems says what the page fails to show of #2048: ref-v1.11's cell
// with web-1's rules 512 and 1536 leaked (red, with their findings) and
// web-2's traffic misrouted; vpccni's cell clean, with its pods drawn.
func (s shown) problems() []string {
	var out []string
	if s.Cells != 2 {
		out = append(out, fmt.Sprintf("%d cells, want 2", s.Cells))
	}
	if s.RefVerdict != "LEAK" {
		out = append(out, fmt.Sprintf("ref-v1.11's cell says %q, want LEAK", s.RefVerdict))
	}
	if s.Leaked512 != 1 || s.Leaked1536 != 1 {
		out = append(out, fmt.Sprintf("web-1's leaked rules drawn: 512 ×%d, 1536 ×%d; want one each", s.Leaked512, s.Leaked1536))
	}
	for _, title := range s.LeakTitles {
		if !strings.Contains(title, "LEAK: rule ") || !strings.Contains(title, "10.0.2.11") {
			out = append(out, fmt.Sprintf("a leaked rule's title does not carry its finding: %q", title))
		}
	}
	if s.Misroutes != 1 || !strings.Contains(s.MisrouteTitle, "MISROUTE: traffic from default/web-2") {
		out = append(out, fmt.Sprintf("web-2's misroute: %d marks, title %q", s.Misroutes, s.MisrouteTitle))
	}
	if s.DefaultVerdict != "clean" || s.DefaultLeaked != 0 || s.DefaultMisrt != 0 {
		out = append(out, fmt.Sprintf("vpccni's cell: verdict %q, %d leaked, %d misroutes; want clean, none", s.DefaultVerdict, s.DefaultLeaked, s.DefaultMisrt))
	}
	if s.DefaultBars < 8 || s.DefaultLanes < 4 {
		out = append(out, fmt.Sprintf("vpccni's cell draws %d objects in %d lanes: not the incident's pods", s.DefaultBars, s.DefaultLanes))
	}
	return out
}

// TestBrowserShowsTheIncident opens the page of #2048 in Chromium: no
// console error, no request beyond the file, ref-v1.11's leaked rules and
// misroute shown, vpccni's cell clean; and the same checks fail on a page
// drawn without the leak marking.
func TestBrowserShowsTheIncident(t *testing.T) {
	browser := browserContext(t)
	dir := outDir(t)
	page := filepath.Join(dir, "incident.html")
	incidentPage(t, page)
	got, s := open[shown](t, browser, page, showQuery, filepath.Join(dir, "incident.png"))
	if len(s.errors) > 0 || len(s.requests) > 0 {
		t.Errorf("loading the page: console errors %q, requests %q", s.errors, s.requests)
	}
	for _, p := range got.problems() {
		t.Error(p)
	}
	t.Logf("page %s, screenshot %s: %+v", page, filepath.Join(dir, "incident.png"), got)

	markFindings = false
	defer func() { markFindings = true }()
	unmarked := filepath.Join(dir, "incident-unmarked.html")
	incidentPage(t, unmarked)
	got, _ = open[shown](t, browser, unmarked, showQuery, "")
	if len(got.problems()) == 0 {
		t.Errorf("a page without the leak marking passes the checks: %+v", got)
	}
}

// TestBrowserCatchesAConsoleErrorAndAFetch: the load checks fail on a page
// that logs an error and fetches from the network.
func TestBrowserCatchesAConsoleErrorAndAFetch(t *testing.T) {
	browser := browserContext(t)
	path := filepath.Join(t.TempDir(), "bad.html")
	bad := `<!DOCTYPE html><html><body><img src="http://192.0.2.1/x.png"><script>console.error("broken");</script></body></html>`
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, s := open[int](t, browser, path, "1", "")
	if len(s.errors) == 0 || len(s.requests) == 0 {
		t.Errorf("a page with console.error and a fetch: errors %q, requests %q", s.errors, s.requests)
	}
}
