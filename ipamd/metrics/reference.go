package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// OutcomeNoAvailableIP is the AddNetwork outcome of a pool with no free
// address, which awscni_no_available_ip_addresses counts.
const OutcomeNoAvailableIP = "no-available-ip"

// referenceSeries are the reference's request and EC2 series, with its
// names, types and label names; the pool's are in pool.go.
type referenceSeries struct {
	addRequests prometheus.Counter
	delRequests *prometheus.CounterVec
	noAvailable prometheus.Counter
	apiLatency  *prometheus.SummaryVec
	ec2Requests *prometheus.CounterVec
	ec2Errors   *prometheus.CounterVec
}

func newReferenceSeries() referenceSeries {
	return referenceSeries{
		addRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "awscni_add_ip_req_count",
			Help: "The number of add IP address requests",
		}),
		delRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_del_ip_req_count",
			Help: "The number of delete IP address requests",
		}, []string{"reason"}),
		noAvailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "awscni_no_available_ip_addresses",
			Help: "The number of pod IP assignments that fail due to no available IP addresses",
		}),
		apiLatency: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "awscni_aws_api_latency_ms",
			Help: "AWS API call latency in ms",
		}, []string{"api", "error", "status"}),
		ec2Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_ec2api_req_count",
			Help: "The number of requests made to EC2 APIs by CNI",
		}, []string{"fn"}),
		ec2Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "awscni_ec2api_error_count",
			Help: "The number of failed EC2 APIs requests",
		}, []string{"fn"}),
	}
}

func (r referenceSeries) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.addRequests, r.delRequests, r.noAvailable, r.apiLatency, r.ec2Requests, r.ec2Errors}
}

// BuildInfo registers awscni_build_info{version,goversion}, constant 1,
// as the reference does for its own build.
func BuildInfo(reg prometheus.Registerer, version string) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "awscni_build_info",
		Help: "A metric with a constant '1' value labeled by the version and the Go version vpccni's ipamd was built from.",
	}, []string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return reg.Register(g)
}

// Status is what vpccni does with one of the reference's metrics.
type Status string

const (
	Exposed    Status = "exposed"         // same name, type and label names
	NotExposed Status = "not exposed"     // no meaning here; Why says why
	Planned    Status = "not exposed yet" // to come with the feature Why names
)

// RefMetric is one of the reference's metrics and what vpccni does with it.
type RefMetric struct {
	Name   string
	Status Status
	Why    string // for NotExposed and Planned
}

// Reference is every metric the reference defines (a test holds it to a
// fixture read from the reference's source, and the exposed ones to what
// a registry here gathers).
var Reference = []RefMetric{
	{Name: "awscni_add_ip_req_count", Status: Exposed},
	{Name: "awscni_assigned_ip_addresses", Status: Exposed},
	{Name: "awscni_assigned_ip_per_cidr", Status: Exposed},
	{Name: "awscni_assigned_ip_per_eni", Status: Exposed},
	{Name: "awscni_aws_api_error_count", Status: Exposed},
	{Name: "awscni_aws_api_latency_ms", Status: Exposed},
	{Name: "awscni_aws_utils_error_count", Status: NotExposed, Why: "no layer of its own between ipamd and EC2 here; EC2 failures are in awscni_aws_api_error_count"},
	{Name: "awscni_build_info", Status: Exposed},
	{Name: "awscni_connmark_backend", Status: Exposed},
	{Name: "awscni_connmark_reconcile_total", Status: Exposed},
	{Name: "awscni_del_ip_req_count", Status: Exposed},
	{Name: "awscni_ec2api_error_count", Status: Exposed},
	{Name: "awscni_ec2api_req_count", Status: Exposed},
	{Name: "awscni_eni_allocated", Status: Exposed},
	{Name: "awscni_eni_max", Status: Exposed},
	{Name: "awscni_force_removed_enis", Status: NotExposed, Why: "ipamd never frees an ENI a pod has an address on"},
	{Name: "awscni_force_removed_ips", Status: NotExposed, Why: "ipamd never gives back an address a pod holds"},
	{Name: "awscni_ip_max", Status: Exposed},
	{Name: "awscni_ipamd_action_inprogress", Status: Exposed},
	{Name: "awscni_ipamd_error_count", Status: Exposed},
	{Name: "awscni_ipamd_node_initialization_duration_seconds", Status: Exposed},
	{Name: "awscni_ipamd_startup_duration_seconds", Status: Exposed},
	{Name: "awscni_no_available_ip_addresses", Status: Exposed},
	{Name: "awscni_pod_eni_error_count", Status: Exposed},
	{Name: "awscni_reconcile_count", Status: NotExposed, Why: "the reference counts its ENI and address reconciliation against EC2, which ipamd does not do; vpccni_reconciler_runs_total counts its pod-state reconciler"},
	{Name: "awscni_sagemakerapi_error_count", Status: NotExposed, Why: "SageMaker HyperPod nodes only"},
	{Name: "awscni_sagemakerapi_req_count", Status: NotExposed, Why: "SageMaker HyperPod nodes only"},
	{Name: "awscni_total_ip_addresses", Status: Exposed},
	{Name: "awscni_total_ipv4_prefixes", Status: Exposed},
}
