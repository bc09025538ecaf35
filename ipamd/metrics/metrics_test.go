package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/vpccni/vpccni/ipamd/metrics"
)

// newMetrics registers a Metrics on a fresh registry with a fixed pool.
func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() metrics.PoolStats { return metrics.PoolStats{} })
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, reg
}

// series returns the one series of family name whose labels are exactly
// labels, failing the test if there is none.
func series(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if sameLabels(m.GetLabel(), labels) {
				return m
			}
		}
		t.Fatalf("%s has no series %v; it has %v", name, labels, f.GetMetric())
	}
	t.Fatalf("no metric family %s", name)
	return nil
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, p := range got {
		if v, ok := want[p.GetName()]; !ok || v != p.GetValue() {
			return false
		}
	}
	return true
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return series(t, g, name, labels).GetCounter().GetValue()
}

func TestNewRejectsNilArguments(t *testing.T) {
	pool := func() metrics.PoolStats { return metrics.PoolStats{} }
	if _, err := metrics.New(nil, pool); err == nil {
		t.Error("New(nil registerer) succeeded")
	}
	if _, err := metrics.New(prometheus.NewRegistry(), nil); err == nil {
		t.Error("New(nil pool) succeeded")
	}
}

// refusingRegisterer registers on an underlying registry but refuses the
// collector describing the metric named refuse.
type refusingRegisterer struct {
	*prometheus.Registry
	refuse string
}

func (r refusingRegisterer) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(descs); close(descs) }()
	refused := false
	for d := range descs {
		refused = refused || strings.Contains(d.String(), `"`+r.refuse+`"`)
	}
	if refused {
		return errors.New("refused")
	}
	return r.Registry.Register(c)
}

func TestNewLeavesNothingRegisteredOnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	pool := func() metrics.PoolStats { return metrics.PoolStats{} }
	// New registers the pool actions last, so everything else has been
	// registered when it fails.
	if _, err := metrics.New(refusingRegisterer{reg, "vpccni_pool_actions_total"}, pool); err == nil {
		t.Fatal("New succeeded although a Register failed")
	}
	// Leftovers from the failed New would make this one fail as
	// already registered.
	if _, err := metrics.New(reg, pool); err != nil {
		t.Fatalf("New after a failed New: %v", err)
	}
}

func TestPoolGaugesAreComputedAtScrapeTime(t *testing.T) {
	var calls atomic.Int32
	var current atomic.Pointer[metrics.PoolStats]
	current.Store(&metrics.PoolStats{
		Total: 30, Assigned: 12, Cooling: 3, ENIs: 2, MaxENIs: 3,
		WarmIPTarget: 5, MinimumIPTarget: 10, WarmENITarget: 1, WarmPrefixTarget: 0,
	})
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, func() metrics.PoolStats { calls.Add(1); return *current.Load() }); err != nil {
		t.Fatal(err)
	}
	names := []string{
		"awscni_total_ip_addresses", "awscni_assigned_ip_addresses", "vpccni_cooling_ip_addresses",
		"awscni_eni_allocated", "awscni_eni_max",
		"vpccni_warm_ip_target", "vpccni_minimum_ip_target", "vpccni_warm_eni_target", "vpccni_warm_prefix_target",
	}
	want := func(total, assigned, cooling, enis, maxENIs, warmIP, minIP, warmENI, warmPrefix int) string {
		values := []int{total, assigned, cooling, enis, maxENIs, warmIP, minIP, warmENI, warmPrefix}
		var b strings.Builder
		for i, n := range names {
			fmt.Fprintf(&b, "# TYPE %s gauge\n%s %d\n", n, n, values[i])
		}
		return b.String()
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("pool() called %d times for one scrape, want 1", got)
	}
	if err := gatherAndCompareIgnoringHelp(reg, want(30, 12, 3, 2, 3, 5, 10, 1, 0), names...); err != nil {
		t.Fatalf("first scrape: %v", err)
	}
	current.Store(&metrics.PoolStats{Total: 46, Assigned: 40, Cooling: 0, ENIs: 3, MaxENIs: 3, WarmENITarget: 2, WarmPrefixTarget: 1})
	if err := gatherAndCompareIgnoringHelp(reg, want(46, 40, 0, 3, 3, 0, 0, 2, 1), names...); err != nil {
		t.Fatalf("second scrape after the pool changed: %v", err)
	}
}

// gatherAndCompareIgnoringHelp compares like testutil.GatherAndCompare but
// takes the HELP text from the gathered families, so the tests pin names,
// types, labels and values without restating every help string.
func gatherAndCompareIgnoringHelp(g prometheus.Gatherer, expected string, names ...string) error {
	families, err := g.Gather()
	if err != nil {
		return err
	}
	var withHelp strings.Builder
	help := map[string]string{}
	for _, f := range families {
		help[f.GetName()] = f.GetHelp()
	}
	for _, line := range strings.Split(expected, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(rest, " ")
			fmt.Fprintf(&withHelp, "# HELP %s %s\n", name, help[name])
		}
		if line != "" {
			withHelp.WriteString(line + "\n")
		}
	}
	return testutil.GatherAndCompare(g, strings.NewReader(withHelp.String()), names...)
}

func TestRequestCountersByResultAndReason(t *testing.T) {
	m, reg := newMetrics(t)
	m.AddRequest("assigned")
	m.AddRequest("assigned")
	m.AddRequest("no-available-ip")
	m.AddRequest("branch-eni-assigned")
	m.AddRequest("something the handler never says")
	m.DelRequest("released", "PodDeleted")
	m.DelRequest("unknown-pod", "PodDeleted")
	m.DelRequest("released", "SetupNSFailed")
	m.DelRequest("released", "")
	m.DelRequest("made-up", "pod default/web-1 deleted")

	want := `
# TYPE vpccni_add_ip_requests_total counter
vpccni_add_ip_requests_total{result="assigned"} 2
vpccni_add_ip_requests_total{result="branch-eni-assigned"} 1
vpccni_add_ip_requests_total{result="no-available-ip"} 1
vpccni_add_ip_requests_total{result="other"} 1
# TYPE vpccni_del_ip_requests_total counter
vpccni_del_ip_requests_total{reason="PodDeleted",result="released"} 1
vpccni_del_ip_requests_total{reason="PodDeleted",result="unknown-pod"} 1
vpccni_del_ip_requests_total{reason="SetupNSFailed",result="released"} 1
vpccni_del_ip_requests_total{reason="unspecified",result="released"} 1
vpccni_del_ip_requests_total{reason="other",result="other"} 1
# TYPE awscni_add_ip_req_count counter
awscni_add_ip_req_count 5
# TYPE awscni_no_available_ip_addresses counter
awscni_no_available_ip_addresses 1
# TYPE awscni_del_ip_req_count counter
awscni_del_ip_req_count{reason="PodDeleted"} 2
awscni_del_ip_req_count{reason="SetupNSFailed"} 1
awscni_del_ip_req_count{reason="unspecified"} 1
awscni_del_ip_req_count{reason="other"} 1
`
	if err := gatherAndCompareIgnoringHelp(reg, want, "vpccni_add_ip_requests_total", "vpccni_del_ip_requests_total",
		"awscni_add_ip_req_count", "awscni_no_available_ip_addresses", "awscni_del_ip_req_count"); err != nil {
		t.Fatal(err)
	}
}

func TestReconcilerCounters(t *testing.T) {
	m, reg := newMetrics(t)
	// Every kind and result exists at zero before anything happens, so the
	// first removal is visible to increase().
	for _, kind := range []string{"released", "rule-to-pod", "rule-from-pod", "rule-iif"} {
		if v := counterValue(t, reg, "vpccni_reconciler_removed_total", map[string]string{"kind": kind}); v != 0 {
			t.Errorf("initial %s = %v, want 0", kind, v)
		}
	}
	m.ReconcilerRemoved("rule-to-pod", 3)
	m.ReconcilerRemoved("rule-to-pod", 2)
	m.ReconcilerRemoved("released", 1)
	m.ReconcilerRemoved("rule-iif", 0)
	m.ReconcilerRemoved("rule-iif", -4) // must neither panic nor count
	m.ReconcilerRemoved("route", 7)
	m.ReconcilerRun(nil)
	m.ReconcilerRun(nil)
	m.ReconcilerRun(errors.New("netlink: dump interrupted"))

	want := `
# TYPE vpccni_reconciler_removed_total counter
vpccni_reconciler_removed_total{kind="other"} 7
vpccni_reconciler_removed_total{kind="released"} 1
vpccni_reconciler_removed_total{kind="rule-from-pod"} 0
vpccni_reconciler_removed_total{kind="rule-iif"} 0
vpccni_reconciler_removed_total{kind="rule-to-pod"} 5
# TYPE vpccni_reconciler_runs_total counter
vpccni_reconciler_runs_total{result="error"} 1
vpccni_reconciler_runs_total{result="success"} 2
`
	if err := gatherAndCompareIgnoringHelp(reg, want, "vpccni_reconciler_removed_total", "vpccni_reconciler_runs_total"); err != nil {
		t.Fatal(err)
	}
}

func TestEC2CallLatencyAndErrorCodes(t *testing.T) {
	m, reg := newMetrics(t)
	throttled := fmt.Errorf("operation error EC2: AssignPrivateIpAddresses: %w",
		&smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "Request limit exceeded."})
	m.EC2Call("AssignPrivateIpAddresses", nil, 120*time.Millisecond)
	m.EC2Call("AssignPrivateIpAddresses", throttled, 30*time.Millisecond)
	m.EC2Call("AssignPrivateIpAddresses", throttled, 2*time.Second)
	m.EC2Call("AttachNetworkInterface", fmt.Errorf("attach: %w", context.DeadlineExceeded), 5*time.Second)
	m.EC2Call("DescribeSubnets", errors.New("dial tcp: connection refused"), time.Millisecond)
	m.EC2Call("CreateTags", &smithy.GenericAPIError{Code: "<html><body>502"}, time.Millisecond)
	m.EC2Call("RebootInstances", nil, 40*time.Millisecond)

	ok := series(t, reg, "vpccni_ec2_api_latency_ms", map[string]string{"api": "AssignPrivateIpAddresses", "error": "false"})
	if h := ok.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 120 {
		t.Errorf("successful call: count %d sum %v, want 1 and 120 ms", h.GetSampleCount(), h.GetSampleSum())
	}
	failed := series(t, reg, "vpccni_ec2_api_latency_ms", map[string]string{"api": "AssignPrivateIpAddresses", "error": "true"})
	if h := failed.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 2030 {
		t.Errorf("failed calls: count %d sum %v, want 2 and 2030 ms", h.GetSampleCount(), h.GetSampleSum())
	}
	// 30 ms lands in the 50 ms bucket, 2 s does not.
	for _, b := range failed.GetHistogram().GetBucket() {
		if b.GetUpperBound() == 50 && b.GetCumulativeCount() != 1 {
			t.Errorf("le=50 bucket = %d, want 1", b.GetCumulativeCount())
		}
	}
	other := series(t, reg, "vpccni_ec2_api_latency_ms", map[string]string{"api": "other", "error": "false"})
	if other.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("unknown API not recorded as other")
	}
	// The reference's summary: status "200", or the error's code.
	refOK := series(t, reg, "awscni_aws_api_latency_ms", map[string]string{"api": "AssignPrivateIpAddresses", "error": "false", "status": "200"})
	refFailed := series(t, reg, "awscni_aws_api_latency_ms", map[string]string{"api": "AssignPrivateIpAddresses", "error": "true", "status": "RequestLimitExceeded"})
	if refOK.GetSummary().GetSampleSum() != 120 || refFailed.GetSummary().GetSampleCount() != 2 {
		t.Errorf("reference latency summary: %v, %v", refOK, refFailed)
	}
	if c := series(t, reg, "awscni_ec2api_error_count", map[string]string{"fn": "AssignPrivateIpAddresses"}); c.GetCounter().GetValue() != 2 {
		t.Errorf("awscni_ec2api_error_count: %v", c)
	}
	if c := series(t, reg, "awscni_ec2api_req_count", map[string]string{"fn": "AssignPrivateIpAddresses"}); c.GetCounter().GetValue() != 3 {
		t.Errorf("awscni_ec2api_req_count: %v", c)
	}

	want := `
# TYPE awscni_aws_api_error_count counter
awscni_aws_api_error_count{api="AssignPrivateIpAddresses",error="RequestLimitExceeded"} 2
awscni_aws_api_error_count{api="AttachNetworkInterface",error="DeadlineExceeded"} 1
awscni_aws_api_error_count{api="CreateTags",error="other"} 1
awscni_aws_api_error_count{api="DescribeSubnets",error="Unknown"} 1
`
	if err := gatherAndCompareIgnoringHelp(reg, want, "awscni_aws_api_error_count"); err != nil {
		t.Fatal(err)
	}
}

func TestEC2ErrorCodesAreBounded(t *testing.T) {
	m, reg := newMetrics(t)
	for i := range 100 {
		m.EC2Call("DescribeInstances", &smithy.GenericAPIError{Code: fmt.Sprintf("Code%d", i)}, time.Millisecond)
	}
	// A code seen before the bound was reached keeps its own series.
	m.EC2Call("DescribeInstances", &smithy.GenericAPIError{Code: "Code0"}, time.Millisecond)

	// 32 codes (maxErrorCodes) keep their own series, the rest share "other".
	n, err := testutil.GatherAndCount(reg, "awscni_aws_api_error_count")
	if err != nil {
		t.Fatal(err)
	}
	if n != 33 {
		t.Fatalf("%d error-code series for 100 distinct codes, want 32 codes plus other", n)
	}
	if v := counterValue(t, reg, "awscni_aws_api_error_count", map[string]string{"api": "DescribeInstances", "error": "Code0"}); v != 2 {
		t.Errorf("Code0 = %v, want 2", v)
	}
	if v := counterValue(t, reg, "awscni_aws_api_error_count", map[string]string{"api": "DescribeInstances", "error": "other"}); v != 68 {
		t.Errorf("other = %v, want 68", v)
	}
}

func TestCheckpointWrites(t *testing.T) {
	m, reg := newMetrics(t)
	m.CheckpointWrite(2*time.Millisecond, nil)
	m.CheckpointWrite(3*time.Millisecond, nil)
	m.CheckpointWrite(500*time.Millisecond, errors.New("no space left on device"))

	if v := counterValue(t, reg, "vpccni_checkpoint_writes_total", map[string]string{"result": "success"}); v != 2 {
		t.Errorf("success = %v, want 2", v)
	}
	if v := counterValue(t, reg, "vpccni_checkpoint_writes_total", map[string]string{"result": "error"}); v != 1 {
		t.Errorf("error = %v, want 1", v)
	}
	h := series(t, reg, "vpccni_checkpoint_write_seconds", map[string]string{}).GetHistogram()
	if h.GetSampleCount() != 3 {
		t.Errorf("count = %d, want 3", h.GetSampleCount())
	}
	if sum := h.GetSampleSum(); sum < 0.504 || sum > 0.506 {
		t.Errorf("sum = %v s, want 0.505", sum)
	}
}

func TestPoolActions(t *testing.T) {
	m, reg := newMetrics(t)
	m.PoolAction("alloc-eni", nil)
	m.PoolAction("alloc-eni", errors.New("InsufficientFreeAddressesInSubnet"))
	m.PoolAction("assign-prefixes", nil)
	m.PoolAction("reboot-node", nil)

	for _, tc := range []struct {
		action, result string
		want           float64
	}{
		{"alloc-eni", "success", 1},
		{"alloc-eni", "error", 1},
		{"assign-prefixes", "success", 1},
		{"free-eni", "success", 0}, // created at zero, never used
		{"unassign-ips", "error", 0},
		{"other", "success", 1},
	} {
		got := counterValue(t, reg, "vpccni_pool_actions_total", map[string]string{"action": tc.action, "result": tc.result})
		if got != tc.want {
			t.Errorf("%s/%s = %v, want %v", tc.action, tc.result, got, tc.want)
		}
	}
}

func TestNilMetricsRecordsNothing(t *testing.T) {
	var m *metrics.Metrics
	m.AddRequest("assigned")
	m.DelRequest("released", "PodDeleted")
	m.ReconcilerRemoved("released", 1)
	m.ReconcilerRun(nil)
	m.EC2Call("DescribeInstances", nil, time.Millisecond)
	m.CheckpointWrite(time.Millisecond, nil)
	m.PoolAction("alloc-eni", nil)
}

func TestHandlerServesExpositionFormat(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() metrics.PoolStats { return metrics.PoolStats{Total: 14, Assigned: 9} })
	if err != nil {
		t.Fatal(err)
	}
	m.AddRequest("assigned")
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, line := range []string{
		"awscni_total_ip_addresses 14",
		"awscni_assigned_ip_addresses 9",
		`vpccni_add_ip_requests_total{result="assigned"} 1`,
		`awscni_add_ip_req_count 1`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, body)
		}
	}
}
