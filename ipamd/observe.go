package ipamd

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/introspect"
	"github.com/vpccni/vpccni/ipamd/metrics"
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
