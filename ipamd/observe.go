package ipamd

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/introspect"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/podeni"
)

// PoolStats is what the metrics' pool gauges read at each scrape.
func (d *Daemon) PoolStats() metrics.PoolStats {
	st := d.store.Stats()
	ps := metrics.PoolStats{Total: st.Total, Assigned: st.Assigned, Cooling: st.Cooling, ENIs: st.ENIs,
		MaxENIs: d.inst.Limits.ENIs}
	if d.cfg.IPv6 {
		ps.Total = st.TotalIPv6
	}
	ps.Prefixes = st.Prefixes
	perENI := max(d.inst.Limits.IPv4PerENI-1, 0) // the primary address is the ENI's own
	if d.pool != nil {
		t := d.pool.Targets()
		ps.MaxENIs, ps.WarmENITarget, ps.WarmIPTarget, ps.MinimumIPTarget, ps.WarmPrefixTarget =
			d.pool.MaxENIs(), t.WarmENI, t.WarmIP, t.MinimumIP, t.WarmPrefix
		if t.PrefixDelegation {
			perENI *= 16
		}
	}
	ps.MaxIPs = ps.MaxENIs * perENI
	ps.Usage = d.eniUsage()
	return ps
}

// Introspection is the daemon as the introspection endpoints show it.
func (d *Daemon) Introspection() introspect.Source { return introspection{d} }

type introspection struct{ d *Daemon }

// ENIs is /v1/enis in the reference's shape (enisview.go). Like the
// reference it names no container: /v1/allocations is where sandboxes
// are, for whoever may see them.
func (s introspection) ENIs() any { return s.d.referenceENIs() }

// allocationView is one allocation as /v1/allocations shows it.
type allocationView struct {
	NetworkName  string     `json:"networkName"`
	ContainerID  string     `json:"containerID"`
	IfName       string     `json:"ifName"`
	Pod          string     `json:"pod,omitempty"`
	IP           netip.Addr `json:"ip"`
	DeviceNumber int        `json:"deviceNumber"`
	RouteTable   int        `json:"routeTable"`
	Since        time.Time  `json:"since"`
	Recovered    bool       `json:"recoveredFromKernel,omitempty"`
	// Releasing: the pod's DEL is done but for its veth pair, which ipamd
	// deletes before the address goes back to the pool.
	Releasing bool `json:"releasing,omitempty"`
}

func (s introspection) Allocations() any {
	out := []allocationView{}
	for _, a := range s.d.store.Allocations() {
		out = append(out, allocationView{NetworkName: a.Key.NetworkName, ContainerID: a.Key.ContainerID, IfName: a.Key.IfName,
			Pod: podName(a.Meta.PodNamespace, a.Meta.PodName), IP: a.IP, DeviceNumber: a.DeviceNumber, RouteTable: a.RouteTable,
			Since: a.Since, Recovered: a.Key.Recovered(), Releasing: a.Releasing})
	}
	return out
}

// poolReport is /v1/pool: counts and targets.
type poolReport struct {
	Instance     string            `json:"instance"`
	InstanceType string            `json:"instanceType"`
	Stats        datastore.Stats   `json:"stats"`
	Available    int               `json:"available"`
	Targets      metrics.PoolStats `json:"targets"`
}

func (s introspection) Pool() any {
	st := s.d.store.Stats()
	return poolReport{Instance: s.d.inst.ID, InstanceType: s.d.inst.Type, Stats: st, Available: st.Available(), Targets: s.d.PoolStats()}
}

// Settings are the settings in effect under the reference's names.
func (s introspection) Settings() map[string]string {
	c := s.d.cfg
	out := map[string]string{
		"ENABLE_IPv6":        strconv.FormatBool(c.IPv6),
		"ENABLE_POD_ENI":     strconv.FormatBool(c.PodENI != nil),
		"IP_COOLDOWN_PERIOD": strconv.Itoa(int(c.Cooldown / time.Second)),
		checkpoint.EnvPath:   c.Checkpoint,
	}
	if s.d.pool != nil {
		for k, v := range s.d.pool.Targets().Settings() {
			out[k] = v
		}
	}
	return out
}

// eniUsage is each ENI's assigned addresses by range, for the per-ENI and
// per-CIDR gauges: the ranges /v1/enis lists (a secondary address as its
// /32, a delegated prefix as itself), each with the allocations in it. An
// allocation being released still holds its address, as in ENIs().
func (d *Daemon) eniUsage() []metrics.ENIUsage {
	enis := d.store.ENIs()
	out := make([]metrics.ENIUsage, len(enis))
	type at struct{ eni, rng int }
	where := map[netip.Prefix]at{}
	var widths []int // the ranges' prefix lengths: /32, and /28 or /80 with prefixes
	for i, e := range enis {
		out[i].ID = e.ID
		add := func(p netip.Prefix) {
			p = p.Masked()
			where[p] = at{i, len(out[i].Ranges)}
			out[i].Ranges = append(out[i].Ranges, metrics.RangeUsage{CIDR: p})
			if !slices.Contains(widths, p.Bits()) {
				widths = append(widths, p.Bits())
			}
		}
		for _, ip := range e.IPv4 {
			add(netip.PrefixFrom(ip, 32))
		}
		for _, p := range e.IPv4Prefixes {
			add(p)
		}
		for _, p := range e.IPv6Prefixes {
			add(p)
		}
	}
	// One map lookup per allocation and range width, rather than a scan
	// of every allocation for every range.
	for _, a := range d.store.Allocations() {
		for _, bits := range widths {
			p, err := a.IP.Prefix(bits)
			if err != nil {
				continue // a width of the other family
			}
			if w, ok := where[p]; ok {
				out[w.eni].Ranges[w.rng].Assigned++
				out[w.eni].Assigned++
				break
			}
		}
	}
	return out
}

// withAPIServer is the with_api_server label of the start-up histogram:
// whether ipamd reads pods from the Kubernetes API. The reference sets it
// when it reached the API server at start; vpccni's ipamd talks to the API
// server only for branch-ENI pods with the kubernetes source, and does
// not wait for it at start.
func (d *Daemon) withAPIServer() bool {
	switch d.cfg.PodENI.(type) {
	case podeni.Kubernetes, *podeni.Kubernetes:
		return true
	}
	return false
}

// startupFailure is an error of Start labelled with the step that failed
// (a metrics.Startup constant); its text is the error's own.
type startupFailure struct {
	step string
	err  error
}

func (f startupFailure) Error() string { return f.err.Error() }
func (f startupFailure) Unwrap() error { return f.err }

// observeStartup records a Start that took took and returned err. An
// error bringUp did not label comes from the socket, Start's last step.
func (d *Daemon) observeStartup(took time.Duration, err error) {
	reason := ""
	if err != nil {
		reason = metrics.StartupSocket
		var f startupFailure
		if errors.As(err, &f) {
			reason = f.step
		}
	}
	d.cfg.Metrics.Startup(took, d.withAPIServer(), reason)
}

// bringUpSteps follows bringUp: the step under way, which labels a
// failure, and node initialization (the ENIs' host networking and the
// host NAT rules), which is timed and tracked as metrics.FnNodeInit.
type bringUpSteps struct {
	m            *metrics.Metrics
	began        time.Time
	step         string
	nodeInitDone bool
}

func (d *Daemon) beginBringUp() *bringUpSteps {
	d.cfg.Metrics.ActionStarted(metrics.FnNodeInit)
	return &bringUpSteps{m: d.cfg.Metrics, began: time.Now(), step: metrics.StartupENISetup}
}

// at says which step bringUp is now taking.
func (s *bringUpSteps) at(step string) { s.step = step }

// nodeInitialized: the ENIs and the host NAT rules are done.
func (s *bringUpSteps) nodeInitialized() {
	s.m.NodeInit(time.Since(s.began), true)
	s.m.ActionDone(metrics.FnNodeInit, nil)
	s.nodeInitDone = true
}

// end labels bringUp's error with the step that failed; an error before
// node initialization was done is a failed node initialization too.
func (s *bringUpSteps) end(err error) error {
	if err == nil {
		return nil
	}
	if !s.nodeInitDone {
		s.m.NodeInit(time.Since(s.began), false)
		s.m.ActionDone(metrics.FnNodeInit, err)
	}
	return startupFailure{step: s.step, err: err}
}

// hostNATStarted and hostNATDone bracket one syncHostNAT pass that has
// rules to write. The rules are iptables rules (go-iptables, whatever
// backs it in the kernel), so the connmark backend is iptables.
func (d *Daemon) hostNATStarted() {
	d.cfg.Metrics.ConnmarkBackend(metrics.ConnmarkIPTables)
	d.cfg.Metrics.ActionStarted(metrics.FnHostNATSync)
}

func (d *Daemon) hostNATDone(err error) {
	d.cfg.Metrics.ActionDone(metrics.FnHostNATSync, err)
	d.cfg.Metrics.ConnmarkReconcile(err)
}
