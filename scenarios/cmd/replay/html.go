package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/explore"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/report/htmlreport"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// openHTML creates the file --html names before anything runs, so a path
// that cannot be written stops the command at once (nil, true when no
// page was asked for).
func openHTML(path string, stderr io.Writer) (*os.File, bool) {
	if path == "" {
		return nil, true
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintf(stderr, "replay: --html %s: %v\n", path, err)
		return nil, false
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "replay: --html %s: %v\n", path, err)
		return nil, false
	}
	return f, true
}

// writeHTML renders the page into f, closes it and prints its path as the
// output's last line.
func writeHTML(f *os.File, page *htmlreport.Page, text, stderr io.Writer) bool {
	err := page.Write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "replay: --html %s: %v\n", f.Name(), err)
		return false
	}
	fmt.Fprintf(text, "report: %s (one page; open it in a browser)\n", f.Name())
	return true
}

// explorePage is an exploration's page in the making: its matrix, and each
// shrunk counterexample replayed so that its timeline is drawn.
type explorePage struct {
	file     *os.File
	page     *htmlreport.Page
	examples map[string]string // "policy mode" → the first counterexample's cell
}

func newExplorePage(f *os.File, title string) *explorePage {
	if f == nil {
		return nil
	}
	return &explorePage{file: f, page: &htmlreport.Page{Title: title}, examples: map[string]string{}}
}

// add replays the counterexample s, written to path, in mode under its
// policy, and adds it with its cell. One that cannot be replayed is added
// with its file's link and why, and the error is returned for the text
// output to say too.
func (e *explorePage) add(verdict, what, path string, s *spec.Scenario, mode, pol string) error {
	if e == nil {
		return nil
	}
	link := path
	if abs, err := filepath.Abs(path); err == nil {
		if rel, err := filepath.Rel(filepath.Dir(e.file.Name()), abs); err == nil {
			link = rel
		}
	}
	res, err := replayExample(s, mode, pol)
	if err != nil {
		e.page.AddExample(verdict, what+" (not replayed for this page: "+err.Error()+")", link, nil)
		return err
	}
	e.page.AddExample(verdict, what, link, res)
	key := pol + " " + mode
	if id := e.page.Examples[len(e.page.Examples)-1].CellID; id != "" && e.examples[key] == "" {
		e.examples[key] = id
	}
	return nil
}

// replayExample runs a counterexample as replay run would.
func replayExample(s *spec.Scenario, mode, pol string) (*engine.Result, error) {
	p, err := policy.ByName(pol)
	if err != nil {
		return nil, err
	}
	return engine.Run(s, mode, p, engine.Options{Tolerant: true})
}

// write draws the matrix, writes the page and prints its path.
func (e *explorePage) write(m explore.Matrix, lines []string, text, stderr io.Writer) bool {
	if e == nil {
		return true
	}
	e.page.Lines = lines
	e.page.SetMatrix(m, e.examples)
	return writeHTML(e.file, e.page, text, stderr)
}
