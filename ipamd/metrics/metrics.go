// Package metrics holds ipamd's Prometheus metrics.
//
// A metric the reference has keeps its name, type and label names
// (awscni_…, reference.go), so its dashboards, alerts and
// cni-metrics-helper keep working; what it lacks, or a finer breakdown of
// what it has, is vpccni_…. Reference lists each of the reference's
// metrics and what vpccni does with it.
//
// Pool gauges, computed from one snapshot per scrape:
//
//	awscni_total_ip_addresses, awscni_assigned_ip_addresses,
//	awscni_total_ipv4_prefixes, awscni_ip_max, awscni_eni_allocated,
//	awscni_eni_max, vpccni_cooling_ip_addresses,
//	vpccni_warm_ip_target, vpccni_minimum_ip_target,
//	vpccni_warm_eni_target, vpccni_warm_prefix_target,
//	awscni_assigned_ip_per_eni{eni}, awscni_assigned_ip_per_cidr{cidr}
//
// Counters, summaries and histograms:
//
//	awscni_add_ip_req_count, vpccni_add_ip_requests_total{result}
//	awscni_del_ip_req_count{reason}, vpccni_del_ip_requests_total{result,reason}
//	awscni_no_available_ip_addresses
//	vpccni_reconciler_removed_total{kind}
//	vpccni_reconciler_runs_total{result}
//	awscni_aws_api_latency_ms{api,error,status}   summary; status "200" or the AWS error code
//	vpccni_ec2_api_latency_ms{api,error}          histogram, error "true"/"false"
//	awscni_aws_api_error_count{api,error}         error: the AWS error code
//	awscni_ec2api_req_count{fn}, awscni_ec2api_error_count{fn}
//	vpccni_checkpoint_writes_total{result}
//	vpccni_checkpoint_write_seconds               histogram
//	vpccni_pool_actions_total{action,result}
//	awscni_build_info{version,goversion}          BuildInfo
//
// ipamd's own life (daemon.go; label values there):
//
//	awscni_ipamd_startup_duration_seconds{success,with_api_server,failure_reason}
//	awscni_ipamd_node_initialization_duration_seconds{success}
//	awscni_ipamd_error_count{fn}, awscni_ipamd_action_inprogress{fn}
//	awscni_pod_eni_error_count{fn}
//	awscni_connmark_backend{backend}, awscni_connmark_reconcile_total{result}
//
// Label values are restricted to the sets in labels.go; anything else is
// recorded as "other" (LabelOther), so a caller's typo or a free-form
// string costs one series, not one per distinct value.
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Histogram buckets. EC2 mutating calls usually take 100 ms to a few
// seconds and retries with back-off stretch them to tens of seconds; a
// checkpoint write is a small file plus fsync, well under a millisecond on
// a healthy disk and up to a second on a saturated one.
var (
	apiLatencyBucketsMs        = []float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}
	checkpointDurationBucketsS = prometheus.ExponentialBuckets(0.0005, 2, 12) // 0.5 ms … ~1 s
)

// Metrics records ipamd's events. A nil *Metrics records nothing, so code
// paths can call it unconditionally when metrics are disabled
// (DISABLE_METRICS).
type Metrics struct {
	addRequests       *prometheus.CounterVec
	delRequests       *prometheus.CounterVec
	reconcilerRemoved *prometheus.CounterVec
	reconcilerRuns    *prometheus.CounterVec
	apiLatency        *prometheus.HistogramVec
	apiErrors         *prometheus.CounterVec
	checkpointWrites  *prometheus.CounterVec
	checkpointSeconds prometheus.Histogram
	poolActions       *prometheus.CounterVec
	ref               referenceSeries
	daemon            daemonSeries

	errorCodes errorCodes
}

// New creates ipamd's metrics and registers them on reg. pool is called
// once per scrape for the pool gauges; it must be safe to call from the
// scraping goroutine. On error nothing stays registered.
func New(reg prometheus.Registerer, pool func() PoolStats) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	if pool == nil {
		return nil, errors.New("metrics: nil pool function")
	}
	m := &Metrics{
		addRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_add_ip_requests_total",
			Help: "AddNetwork requests from the CNI plugin, by outcome.",
		}, []string{"result"}),
		delRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_del_ip_requests_total",
			Help: "DelNetwork requests from the CNI plugin, by outcome and the plugin's reason.",
		}, []string{"result", "reason"}),
		reconcilerRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_reconciler_removed_total",
			Help: "Leaked state the reconciler removed: addresses released, ip rules deleted by selector.",
		}, []string{"kind"}),
		reconcilerRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_reconciler_runs_total",
			Help: "Reconciler passes, by result.",
		}, []string{"result"}),
		apiLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vpccni_ec2_api_latency_ms",
			Help:    "EC2 API call latency in milliseconds, retries included.",
			Buckets: apiLatencyBucketsMs,
		}, []string{"api", "error"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_aws_api_error_count",
			Help: "Failed EC2 API calls, by AWS error code.",
		}, []string{"api", "error"}),
		checkpointWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_checkpoint_writes_total",
			Help: "Datastore checkpoint writes, by result.",
		}, []string{"result"}),
		checkpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "vpccni_checkpoint_write_seconds",
			Help:    "Datastore checkpoint write duration in seconds.",
			Buckets: checkpointDurationBucketsS,
		}),
		poolActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vpccni_pool_actions_total",
			Help: "Warm-pool EC2 actions, by action and result.",
		}, []string{"action", "result"}),
		ref:    newReferenceSeries(),
		daemon: newDaemonSeries(),
	}
	collectors := append(append(m.ref.collectors(), m.daemon.collectors()...), []prometheus.Collector{
		newPoolCollector(pool),
		m.addRequests, m.delRequests,
		m.reconcilerRemoved, m.reconcilerRuns,
		m.apiLatency, m.apiErrors,
		m.checkpointWrites, m.checkpointSeconds,
		m.poolActions,
	}...)
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	m.initSeries()
	return m, nil
}

// initSeries creates the series of the small, fixed label sets at zero.
// A counter series that first appears at 1 has no earlier sample, so
// increase() and rate() miss that first event; alerts on a rare event
// (a leaked rule removed, a failed checkpoint) are exactly the ones that
// must not miss it. The request and EC2 series are left to appear on use:
// their label products are large and most combinations never happen.
func (m *Metrics) initSeries() {
	for kind := range reconcilerKinds {
		m.reconcilerRemoved.WithLabelValues(kind)
	}
	for _, result := range []string{ResultSuccess, ResultError} {
		m.reconcilerRuns.WithLabelValues(result)
		m.checkpointWrites.WithLabelValues(result)
		for action := range poolActions {
			m.poolActions.WithLabelValues(action, result)
		}
	}
	m.daemon.initSeries()
}

// AddRequest counts an AddNetwork request by its outcome word (the
// handler's log outcome, e.g. "assigned", "no-available-ip").
func (m *Metrics) AddRequest(result string) {
	if m == nil {
		return
	}
	m.addRequests.WithLabelValues(oneOf(requestResults, result)).Inc()
	m.ref.addRequests.Inc()
	if result == OutcomeNoAvailableIP {
		m.ref.noAvailable.Inc()
	}
}

// DelRequest counts a DelNetwork request by its outcome word and the
// request's Reason ("PodDeleted", "SetupNSFailed"; empty is recorded as
// ReasonUnspecified).
func (m *Metrics) DelRequest(result, reason string) {
	if m == nil {
		return
	}
	reasonLabel := oneOf(delReasons, reason)
	if reason == "" {
		reasonLabel = ReasonUnspecified
	}
	m.delRequests.WithLabelValues(oneOf(requestResults, result), reasonLabel).Inc()
	m.ref.delRequests.WithLabelValues(reasonLabel).Inc()
}

// ReconcilerRemoved counts n objects of kind ("released", "rule-to-pod",
// "rule-from-pod", "rule-iif") removed by one reconciler pass. n <= 0
// records nothing: counters only go up.
func (m *Metrics) ReconcilerRemoved(kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.reconcilerRemoved.WithLabelValues(oneOf(reconcilerKinds, kind)).Add(float64(n))
}

// ReconcilerRun counts a reconciler pass; err is its overall failure.
func (m *Metrics) ReconcilerRun(err error) {
	if m == nil {
		return
	}
	m.reconcilerRuns.WithLabelValues(resultOf(err)).Inc()
}

// EC2Call records an EC2 API call (api is the SDK operation name, e.g.
// "AssignPrivateIpAddresses") that took d and returned err. A failure is
// also counted by its AWS error code, found through the SDK's wrapping
// with errors.As on smithy.APIError.
func (m *Metrics) EC2Call(api string, err error, d time.Duration) {
	if m == nil {
		return
	}
	apiLabel := oneOf(ec2APIs, api)
	failed := "false"
	if err != nil {
		failed = "true"
	}
	ms := float64(d) / float64(time.Millisecond)
	m.apiLatency.WithLabelValues(apiLabel, failed).Observe(ms)
	m.ref.ec2Requests.WithLabelValues(apiLabel).Inc()
	status := "200"
	if err != nil {
		code := m.errorCodes.label(err)
		m.apiErrors.WithLabelValues(apiLabel, code).Inc()
		m.ref.ec2Errors.WithLabelValues(apiLabel).Inc()
		status = code
	}
	m.ref.apiLatency.WithLabelValues(apiLabel, failed, status).Observe(ms)
}

// CheckpointWrite records a datastore checkpoint write that took d and
// returned err.
func (m *Metrics) CheckpointWrite(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.checkpointWrites.WithLabelValues(resultOf(err)).Inc()
	m.checkpointSeconds.Observe(d.Seconds())
}

// PoolAction counts a warm-pool action ("alloc-eni", "free-eni",
// "assign-ips", "unassign-ips", "assign-prefixes", "unassign-prefixes")
// and whether it failed.
func (m *Metrics) PoolAction(action string, err error) {
	if m == nil {
		return
	}
	m.poolActions.WithLabelValues(oneOf(poolActions, action), resultOf(err)).Inc()
}

// Handler serves the metrics gathered from g in the Prometheus exposition
// formats. A collector failing does not fail the scrape (ContinueOnError):
// the other metrics are still served, because during an incident a partial
// scrape is more useful than an HTTP 500.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
