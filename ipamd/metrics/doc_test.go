package metrics_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/ipamd/metrics"
)

// The metrics table of docs/settings.md is metrics.Reference with the
// fixture's types and labels, between two markers; -update rewrites it.
const (
	settingsDoc      = "../../docs/settings.md"
	metricsTableFrom = "<!-- metrics table: generated from ipamd/metrics/reference.go (go test ./ipamd/metrics -run TestMetricsDoc -update) -->"
	metricsTableTo   = "<!-- end of metrics table -->"
)

func TestMetricsDoc(t *testing.T) {
	fixture := map[string]refMetric{}
	for _, m := range readMetricsFixture(t) {
		fixture[m.name] = m
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | here | why not |\n|---|---|---|---|---|\n")
	for _, r := range metrics.Reference {
		m := fixture[r.Name]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Name, m.typ, strings.Join(m.labels, ", "), r.Status, r.Why)
	}
	raw, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, metricsTableFrom), strings.Index(doc, metricsTableTo)
	if i < 0 || j < i {
		t.Fatalf("%s: no metrics table between %q and %q", settingsDoc, metricsTableFrom, metricsTableTo)
	}
	want := doc[:i] + metricsTableFrom + "\n\n" + b.String() + "\n" + doc[j:]
	if *update {
		if err := os.WriteFile(settingsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Fatalf("%s's metrics table is not metrics.Reference's: regenerate it (go test ./ipamd/metrics -run TestMetricsDoc -update)", settingsDoc)
	}
}
