package metrics_test

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vpccni/vpccni/ipamd/metrics"
)

func fnLabel(fn string) map[string]string { return map[string]string{"fn": fn} }

// TestActionsInProgressAndErrors: a run is in progress between
// ActionStarted and ActionDone, a failure is counted under its fn, and an
// fn outside the set is "other" (started and done alike, so the gauge
// comes back to zero).
func TestActionsInProgressAndErrors(t *testing.T) {
	m, reg := newMetrics(t)
	gauge := func(fn string) float64 {
		return series(t, reg, "awscni_ipamd_action_inprogress", fnLabel(fn)).GetGauge().GetValue()
	}
	if v := counterValue(t, reg, "awscni_ipamd_error_count", fnLabel(metrics.FnWarmPoolAction)); v != 0 {
		t.Errorf("warmPoolAction errors at start = %v, want a series at 0", v)
	}
	m.ActionStarted(metrics.FnHostNATSync)
	m.ActionStarted(metrics.FnHostNATSync)
	if v := gauge(metrics.FnHostNATSync); v != 2 {
		t.Errorf("in progress = %v, want 2", v)
	}
	m.ActionDone(metrics.FnHostNATSync, nil)
	m.ActionDone(metrics.FnHostNATSync, errors.New("iptables: exit status 4"))
	if v := gauge(metrics.FnHostNATSync); v != 0 {
		t.Errorf("in progress after both ended = %v, want 0", v)
	}
	if v := counterValue(t, reg, "awscni_ipamd_error_count", fnLabel(metrics.FnHostNATSync)); v != 1 {
		t.Errorf("errors = %v, want 1", v)
	}
	m.ActionFailed(metrics.FnWarmPoolAction)
	if v := counterValue(t, reg, "awscni_ipamd_error_count", fnLabel(metrics.FnWarmPoolAction)); v != 1 {
		t.Errorf("warmPoolAction errors = %v, want 1", v)
	}
	m.ActionStarted("somebody's free text")
	if v := gauge(metrics.LabelOther); v != 1 {
		t.Errorf("unknown fn in progress = %v, want 1 under %q", v, metrics.LabelOther)
	}
	m.ActionDone("somebody's free text", errors.New("x"))
	if v := gauge(metrics.LabelOther); v != 0 {
		t.Errorf("unknown fn in progress after done = %v, want 0", v)
	}
}

func TestPodENIErrors(t *testing.T) {
	m, reg := newMetrics(t)
	m.PodENIError(metrics.PodENILookup)
	m.PodENIError(metrics.PodENILookup)
	m.PodENIError("default/pod-sg")
	for fn, want := range map[string]float64{metrics.PodENILookup: 2, metrics.PodENINoTrunk: 0, metrics.PodENIInvalid: 0, metrics.LabelOther: 1} {
		if v := counterValue(t, reg, "awscni_pod_eni_error_count", fnLabel(fn)); v != want {
			t.Errorf("%s = %v, want %v", fn, v, want)
		}
	}
}

// TestStartupHistograms: the labels say success, the API server and the
// step that failed (bounded), with the reference's (the client's default)
// buckets.
func TestStartupHistograms(t *testing.T) {
	m, reg := newMetrics(t)
	m.Startup(1500*time.Millisecond, true, "")
	m.Startup(200*time.Millisecond, false, metrics.StartupCheckpoint)
	m.Startup(time.Millisecond, false, "a message, not a step")
	m.NodeInit(time.Second, true)
	m.NodeInit(time.Second, false)

	h := series(t, reg, "awscni_ipamd_startup_duration_seconds",
		map[string]string{"success": "true", "with_api_server": "true", "failure_reason": ""}).GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
		t.Errorf("success: count %d sum %v, want 1 and 1.5", h.GetSampleCount(), h.GetSampleSum())
	}
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if !slices.Equal(bounds, prometheus.DefBuckets) {
		t.Errorf("buckets %v, want the client's defaults %v", bounds, prometheus.DefBuckets)
	}
	for _, reason := range []string{metrics.StartupCheckpoint, metrics.LabelOther} {
		l := map[string]string{"success": "false", "with_api_server": "false", "failure_reason": reason}
		if n := series(t, reg, "awscni_ipamd_startup_duration_seconds", l).GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("failure %q: %d observations, want 1", reason, n)
		}
	}
	for _, ok := range []string{"true", "false"} {
		l := map[string]string{"success": ok}
		if n := series(t, reg, "awscni_ipamd_node_initialization_duration_seconds", l).GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("node init success=%s: %d observations, want 1", ok, n)
		}
	}
}

// TestConnmark: the passes' counters exist at zero, as the reference
// creates them; the backend appears once reported.
func TestConnmark(t *testing.T) {
	m, reg := newMetrics(t)
	for _, r := range []string{"success", "error"} {
		if v := counterValue(t, reg, "awscni_connmark_reconcile_total", map[string]string{"result": r}); v != 0 {
			t.Errorf("%s at start = %v, want 0", r, v)
		}
	}
	m.ConnmarkReconcile(nil)
	m.ConnmarkReconcile(errors.New("iptables: exit status 1"))
	m.ConnmarkReconcile(nil)
	if v := counterValue(t, reg, "awscni_connmark_reconcile_total", map[string]string{"result": "success"}); v != 2 {
		t.Errorf("success = %v, want 2", v)
	}
	m.ConnmarkBackend(metrics.ConnmarkIPTables)
	if v := series(t, reg, "awscni_connmark_backend", map[string]string{"backend": "iptables"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("iptables backend = %v, want 1", v)
	}
}

// TestPerENIGaugesFollowThePool: the per-ENI and per-CIDR series are the
// pool's at each scrape: a range or an ENI gone is gone from the next
// scrape, not left at its last value.
func TestPerENIGaugesFollowThePool(t *testing.T) {
	var usage atomic.Pointer[[]metrics.ENIUsage]
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, func() metrics.PoolStats { return metrics.PoolStats{Usage: *usage.Load()} }); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix("10.0.64.16/28")
	usage.Store(&[]metrics.ENIUsage{
		{ID: "eni-a", Assigned: 3, Ranges: []metrics.RangeUsage{{CIDR: pfx, Assigned: 3}}},
		{ID: "eni-b", Assigned: 0, Ranges: []metrics.RangeUsage{{CIDR: netip.MustParsePrefix("10.0.2.7/32")}}},
	})
	if v := series(t, reg, "awscni_assigned_ip_per_eni", map[string]string{"eni": "eni-a"}).GetGauge().GetValue(); v != 3 {
		t.Errorf("eni-a = %v, want 3", v)
	}
	if v := series(t, reg, "awscni_assigned_ip_per_cidr", map[string]string{"cidr": pfx.String()}).GetGauge().GetValue(); v != 3 {
		t.Errorf("%s = %v, want 3", pfx, v)
	}
	usage.Store(&[]metrics.ENIUsage{{ID: "eni-a", Assigned: 1, Ranges: []metrics.RangeUsage{{CIDR: pfx, Assigned: 1}}}})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "awscni_assigned_ip_per_eni", "awscni_assigned_ip_per_cidr":
			if len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
				t.Errorf("%s after eni-b left: %v, want one series at 1", f.GetName(), f.GetMetric())
			}
		}
	}
}

func TestNilMetricsRecordsNothingOfTheDaemon(t *testing.T) {
	var m *metrics.Metrics
	m.ActionStarted(metrics.FnNodeInit)
	m.ActionDone(metrics.FnNodeInit, errors.New("x"))
	m.ActionFailed(metrics.FnWarmPoolAction)
	m.PodENIError(metrics.PodENILookup)
	m.Startup(time.Second, false, "")
	m.NodeInit(time.Second, true)
	m.ConnmarkBackend(metrics.ConnmarkIPTables)
	m.ConnmarkReconcile(nil)
}
