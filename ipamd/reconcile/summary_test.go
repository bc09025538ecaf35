package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/vpccni/vpccni/ipamd/reconcile"
)

// summaries runs one pass at each "now" on the gone-pod node and returns
// the level of each pass's summary line ("" when it logged none).
func summaries(t *testing.T, nows ...time.Time) []string {
	t.Helper()
	w, pool := gonePod(t, t0)
	var buf bytes.Buffer
	now := t0
	r := reconcile.New(reconcile.Config{Kernel: w.Node, Pool: pool, Now: func() time.Time { return now },
		Log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	var levels []string
	for _, n := range nows {
		now = n
		buf.Reset()
		_, err := r.Run(context.Background())
		must(t, err)
		level := ""
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			rec := map[string]any{}
			must(t, json.Unmarshal(line, &rec))
			if rec["msg"] == "reconcile pass" {
				level, _ = rec["level"].(string)
			}
		}
		levels = append(levels, level)
	}
	return levels
}

// TestPassSummaryLevel: the loop runs every few seconds, so a pass that
// found nothing to do says so at DEBUG; one that released or removed
// something says so at INFO.
func TestPassSummaryLevel(t *testing.T) {
	// Within the grace period (nothing to do), past it (the gone pod's
	// rules and allocation go), then again (nothing left).
	got := summaries(t, t0, t0.Add(time.Hour), t0.Add(2*time.Hour))
	want := []string{"DEBUG", "INFO", "DEBUG"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("summary levels %q, want %q", got, want)
		}
	}
}
