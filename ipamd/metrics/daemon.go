package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the fn label of awscni_ipamd_error_count and
// awscni_ipamd_action_inprogress: ipamd's own actions that can fail or
// take long. The reference labels these series with its own Go function
// names (increaseDatastorePool, nodeIPPoolReconcile, …); vpccni's ipamd is
// built differently, so the values are vpccni's. Only nodeInit means the
// same thing in both: bringing the node's networking up at start.
const (
	FnNodeInit          = "nodeInit"          // Start: ENI host networking and host NAT (bringUp)
	FnHostNATSync       = "hostNATSync"       // syncHostNAT: SNAT and connmark rules and rule 1024
	FnCheckpointRestore = "checkpointRestore" // restore: read the checkpoint, or rebuild from the kernel
	FnCheckpointCommit  = "checkpointCommit"  // commit: a datastore change made durable before answering
	FnReconcileRelease  = "reconcileRelease"  // the reconciler releasing an address no pod uses
	FnReconcilePass     = "reconcilePass"     // one pass of the reconciler over the node
	FnReapHandedOver    = "reapHandedOver"    // deleting handed-over veths and releasing their addresses
	// FnWarmPoolAction is a failed warm-pool EC2 action. Only its errors
	// are counted (the warm pool reports an action once it is over);
	// vpccni_pool_actions_total breaks them down by action.
	FnWarmPoolAction = "warmPoolAction"
)

// trackedActions are the fns whose runs are in
// awscni_ipamd_action_inprogress; failedActions those whose failures are
// counted in awscni_ipamd_error_count.
var (
	trackedActions = setOf(FnNodeInit, FnHostNATSync, FnCheckpointRestore, FnCheckpointCommit, FnReconcileRelease,
		FnReconcilePass, FnReapHandedOver)
	failedActions = setOf(FnNodeInit, FnHostNATSync, FnCheckpointRestore, FnCheckpointCommit, FnReconcileRelease,
		FnReconcilePass, FnReapHandedOver, FnWarmPoolAction)
)

// Values of the fn label of awscni_pod_eni_error_count: why a branch-ENI
// pod (security groups for pods) was refused or could not be torn down.
// The reference counts its own start-up and trunk-setup functions here;
// vpccni attaches no trunk (the VPC resource controller does), so its
// pod-ENI failures are those of the requests.
const (
	PodENILookup  = "lookupPod"     // the pod's branch ENI could not be looked up (ADD or DEL)
	PodENINoTrunk = "noTrunk"       // no trunk ENI, or its link index unknown (ADD)
	PodENIInvalid = "invalidPodENI" // the pod's branch ENI is unusable in this IP mode (ADD or DEL)
)

var podENIFailures = setOf(PodENILookup, PodENINoTrunk, PodENIInvalid)

// Values of the failure_reason label of awscni_ipamd_startup_duration_seconds:
// the step of Start that failed, "" when it succeeded. The reference has
// "api_server_connectivity" and "node_initialization"; vpccni's ipamd does
// not wait for the API server, and every reason but StartupSocket is a
// part of what the reference calls node_initialization.
const (
	StartupENISetup     = "eni_setup"     // an ENI's host networking
	StartupHostNAT      = "host_nat"      // SNAT and connmark rules
	StartupCheckpoint   = "checkpoint"    // reading or first writing the checkpoint
	StartupReleaseQueue = "release_queue" // draining the plugin's queued releases
	StartupReap         = "reap"          // deleting veths handed over by the last run
	StartupSocket       = "socket"        // creating or serving the socket
)

var startupFailures = setOf(StartupENISetup, StartupHostNAT, StartupCheckpoint, StartupReleaseQueue, StartupReap,
	StartupSocket)

// Values of the backend label of awscni_connmark_backend, the reference's.
// vpccni's host NAT writes iptables rules (go-iptables), whatever backs
// them in the kernel, so it reports ConnmarkIPTables.
const (
	ConnmarkIPTables = "iptables"
	ConnmarkNFTables = "nftables"
)

var connmarkBackends = setOf(ConnmarkIPTables, ConnmarkNFTables)

// startupBuckets are the client library's default buckets (5 ms … 10 s),
// which the reference's start-up histograms use: the same buckets let a
// fleet that runs both aggregate them.
var startupBuckets = prometheus.DefBuckets

// daemonSeries are the reference's series of ipamd's own life: start-up,
// its long actions and their failures, pod-ENI failures, host NAT.
type daemonSeries struct {
	errors            *prometheus.CounterVec
	inProgress        *prometheus.GaugeVec
	podENIErrors      *prometheus.CounterVec
	startup           *prometheus.HistogramVec
	nodeInit          *prometheus.HistogramVec
	connmarkBackend   *prometheus.GaugeVec
	connmarkReconcile *prometheus.CounterVec
}

func newDaemonSeries() daemonSeries {
	return daemonSeries{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_ipamd_error_count",
			Help: "Failures of ipamd's own actions, by action (vpccni's names).",
		}, []string{"fn"}),
		inProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "awscni_ipamd_action_inprogress",
			Help: "Runs of ipamd's own actions under way now, by action (vpccni's names).",
		}, []string{"fn"}),
		podENIErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_pod_eni_error_count",
			Help: "Branch-ENI pod requests that failed, by the step that failed.",
		}, []string{"fn"}),
		startup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "awscni_ipamd_startup_duration_seconds",
			Help:    "Time from ipamd's start to serving its socket (or failing to), in seconds.",
			Buckets: startupBuckets,
		}, []string{"success", "with_api_server", "failure_reason"}),
		nodeInit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "awscni_ipamd_node_initialization_duration_seconds",
			Help:    "Time ipamd's start spent on the ENIs' host networking and the host NAT rules, in seconds.",
			Buckets: startupBuckets,
		}, []string{"success"}),
		connmarkBackend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "awscni_connmark_backend",
			Help: "1 for the packet-filter backend the host NAT and connmark rules are written with.",
		}, []string{"backend"}),
		connmarkReconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_connmark_reconcile_total",
			Help: "Passes that made the host NAT and connmark rules what the settings say, by result.",
		}, []string{"result"}),
	}
}

func (s daemonSeries) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.errors, s.inProgress, s.podENIErrors, s.startup, s.nodeInit, s.connmarkBackend,
		s.connmarkReconcile}
}

// initSeries creates the fixed sets' series at zero (see
// Metrics.initSeries). The start-up histograms and the backend gauge are
// left to appear when observed: a histogram series at zero observations
// says nothing, and a backend is reported only once it is in use.
func (s daemonSeries) initSeries() {
	for fn := range failedActions {
		s.errors.WithLabelValues(fn)
	}
	for fn := range trackedActions {
		s.inProgress.WithLabelValues(fn)
	}
	for fn := range podENIFailures {
		s.podENIErrors.WithLabelValues(fn)
	}
	for _, result := range []string{ResultSuccess, ResultError} {
		s.connmarkReconcile.WithLabelValues(result)
	}
}

// ActionStarted marks a run of fn (one of the Fn constants) as under way;
// ActionDone, which must follow, ends it and counts err.
func (m *Metrics) ActionStarted(fn string) {
	if m == nil {
		return
	}
	m.daemon.inProgress.WithLabelValues(oneOf(trackedActions, fn)).Inc()
}

// ActionDone ends the run of fn that ActionStarted began; a non-nil err
// counts as a failure of fn.
func (m *Metrics) ActionDone(fn string, err error) {
	if m == nil {
		return
	}
	m.daemon.inProgress.WithLabelValues(oneOf(trackedActions, fn)).Dec()
	if err != nil {
		m.daemon.errors.WithLabelValues(oneOf(failedActions, fn)).Inc()
	}
}

// ActionFailed counts a failure of fn whose run is not tracked
// (FnWarmPoolAction).
func (m *Metrics) ActionFailed(fn string) {
	if m == nil {
		return
	}
	m.daemon.errors.WithLabelValues(oneOf(failedActions, fn)).Inc()
}

// PodENIError counts a branch-ENI pod request that failed at fn (one of
// the PodENI constants).
func (m *Metrics) PodENIError(fn string) {
	if m == nil {
		return
	}
	m.daemon.podENIErrors.WithLabelValues(oneOf(podENIFailures, fn)).Inc()
}

// Startup records one start of ipamd that took d: failureReason is the
// Startup constant of the step that failed, "" when it succeeded;
// withAPIServer says whether ipamd reads pods from the Kubernetes API.
func (m *Metrics) Startup(d time.Duration, withAPIServer bool, failureReason string) {
	if m == nil {
		return
	}
	success, reason := "true", ""
	if failureReason != "" {
		success, reason = "false", oneOf(startupFailures, failureReason)
	}
	m.daemon.startup.WithLabelValues(success, boolLabel(withAPIServer), reason).Observe(d.Seconds())
}

// NodeInit records the node-initialization part of a start, which took d
// and succeeded or not.
func (m *Metrics) NodeInit(d time.Duration, ok bool) {
	if m == nil {
		return
	}
	m.daemon.nodeInit.WithLabelValues(boolLabel(ok)).Observe(d.Seconds())
}

// ConnmarkBackend reports backend (ConnmarkIPTables or ConnmarkNFTables)
// as the one the connmark rules are written with.
func (m *Metrics) ConnmarkBackend(backend string) {
	if m == nil {
		return
	}
	m.daemon.connmarkBackend.WithLabelValues(oneOf(connmarkBackends, backend)).Set(1)
}

// ConnmarkReconcile counts one pass over the host NAT and connmark rules
// and whether it failed.
func (m *Metrics) ConnmarkReconcile(err error) {
	if m == nil {
		return
	}
	m.daemon.connmarkReconcile.WithLabelValues(resultOf(err)).Inc()
}

// boolLabel is a bool as the reference's labels spell it.
func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
