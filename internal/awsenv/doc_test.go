package awsenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The settings table of docs/settings.md is this catalogue, rendered
// between two markers; -update rewrites it there.
const (
	settingsDoc = "../../docs/settings.md"
	tableStart  = "<!-- settings table: generated from internal/awsenv/catalogue.go (go test ./internal/awsenv -run TestSettingsDoc -update) -->"
	tableEnd    = "<!-- end of settings table -->"
)

func renderTable() string {
	var b strings.Builder
	b.WriteString("| variable | container | reference's default | here | what it does here, or why not |\n|---|---|---|---|---|\n")
	for _, v := range All() {
		def := "`" + v.Default + "`"
		if v.Default == "" {
			def = "(unset)"
		}
		note := strings.ReplaceAll(v.Note, "|", "\\|")
		if v.DefaultGap != "" {
			note += "; at its default, " + v.DefaultGap
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", v.Name, v.Container, def, v.Status, note)
	}
	return b.String()
}

// TestSettingsDoc: docs/settings.md lists every variable of the catalogue
// with its status, as the catalogue says.
func TestSettingsDoc(t *testing.T) {
	b, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no settings table between %q and %q", settingsDoc, tableStart, tableEnd)
	}
	want := doc[:i] + tableStart + "\n\n" + renderTable() + "\n" + doc[j:]
	if *update {
		if err := os.WriteFile(settingsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Fatalf("%s's settings table is not the catalogue's: regenerate it (go test ./internal/awsenv -run TestSettingsDoc -update)", settingsDoc)
	}
}
