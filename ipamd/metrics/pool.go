package metrics

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolStats is a snapshot of the address pool and the targets it is
// managed towards.
type PoolStats struct {
	Total    int // pod addresses the node holds (assigned, cooling and free)
	Assigned int // addresses assigned to pods
	Cooling  int // released addresses not yet reusable
	ENIs     int // ENIs attached and managed
	MaxENIs  int // ENIs the instance may attach (MAX_ENI applied)
	MaxIPs   int // pod addresses the instance may hold on MaxENIs ENIs
	Prefixes int // IPv4 /28 prefixes the node holds (prefix delegation)

	WarmIPTarget     int // WARM_IP_TARGET, 0 when unset
	MinimumIPTarget  int // MINIMUM_IP_TARGET, 0 when unset
	WarmENITarget    int // WARM_ENI_TARGET
	WarmPrefixTarget int // WARM_PREFIX_TARGET, 0 when unset

	// ENIs' assigned addresses, each ENI and each of its ranges. Not in
	// /v1/pool's JSON: /v1/enis shows the same per ENI, with the pods.
	Usage []ENIUsage `json:"-"`
}

// ENIUsage is one ENI's assigned addresses, in all and by address range.
type ENIUsage struct {
	ID       string
	Assigned int
	Ranges   []RangeUsage
}

// RangeUsage is one address range of an ENI: a secondary address as its
// /32, a delegated prefix as itself, and how many of its addresses pods
// hold.
type RangeUsage struct {
	CIDR     netip.Prefix
	Assigned int
}

// poolGauge is one gauge of the pool collector: its description and the
// field of the snapshot it reports.
type poolGauge struct {
	desc  *prometheus.Desc
	value func(PoolStats) int
}

// poolCollector reports PoolStats as gauges at scrape time. One collector
// rather than a GaugeFunc per value so that a scrape takes a single
// snapshot: the gauges of one scrape then agree with each other (assigned
// never exceeds total because the pool changed between two calls), and the
// pool is read once per scrape (Daemon.PoolStats looks at the datastore
// three times: counts, ENIs, allocations).
//
// The per-ENI and per-range gauges are computed the same way, so an ENI
// or a range gone from the pool is gone from the next scrape, where a
// GaugeVec set on each change would keep its last value until deleted by
// hand. They agree with each other, but come from a later look at the
// datastore than the counts: with calls in flight their sum can differ
// from awscni_assigned_ip_addresses by those calls.
type poolCollector struct {
	pool     func() PoolStats
	gauges   []poolGauge
	perENI   *prometheus.Desc // {eni}
	perRange *prometheus.Desc // {cidr}
}

func newPoolCollector(pool func() PoolStats) *poolCollector {
	gauge := func(name, help string, value func(PoolStats) int) poolGauge {
		return poolGauge{desc: prometheus.NewDesc(name, help, nil, nil), value: value}
	}
	return &poolCollector{
		pool: pool,
		perENI: prometheus.NewDesc("awscni_assigned_ip_per_eni",
			"Pod addresses assigned on each ENI in the pool (0 for one with none).", []string{"eni"}, nil),
		perRange: prometheus.NewDesc("awscni_assigned_ip_per_cidr",
			"Pod addresses assigned in each address range of the pool: a secondary address as its /32, a delegated prefix as itself.",
			[]string{"cidr"}, nil),
		gauges: []poolGauge{
			gauge("awscni_total_ip_addresses", "Pod addresses the node holds: assigned, cooling and free.",
				func(s PoolStats) int { return s.Total }),
			gauge("awscni_assigned_ip_addresses", "Pod addresses assigned to pods.",
				func(s PoolStats) int { return s.Assigned }),
			gauge("vpccni_cooling_ip_addresses", "Released pod addresses in their cooldown, not yet reusable.",
				func(s PoolStats) int { return s.Cooling }),
			gauge("awscni_eni_allocated", "ENIs attached to the node and managed by ipamd.",
				func(s PoolStats) int { return s.ENIs }),
			gauge("awscni_eni_max", "ENIs the node may attach.",
				func(s PoolStats) int { return s.MaxENIs }),
			gauge("awscni_ip_max", "Pod addresses the node may hold on the ENIs it may attach.",
				func(s PoolStats) int { return s.MaxIPs }),
			gauge("awscni_total_ipv4_prefixes", "IPv4 /28 prefixes the node holds (prefix delegation).",
				func(s PoolStats) int { return s.Prefixes }),
			gauge("vpccni_warm_ip_target", "WARM_IP_TARGET in effect (0: unset).",
				func(s PoolStats) int { return s.WarmIPTarget }),
			gauge("vpccni_minimum_ip_target", "MINIMUM_IP_TARGET in effect (0: unset).",
				func(s PoolStats) int { return s.MinimumIPTarget }),
			gauge("vpccni_warm_eni_target", "WARM_ENI_TARGET in effect.",
				func(s PoolStats) int { return s.WarmENITarget }),
			gauge("vpccni_warm_prefix_target", "WARM_PREFIX_TARGET in effect (0: unset).",
				func(s PoolStats) int { return s.WarmPrefixTarget }),
		},
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
	ch <- c.perENI
	ch <- c.perRange
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	stats := c.pool()
	for _, g := range c.gauges {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(g.value(stats)))
	}
	for _, e := range stats.Usage {
		ch <- prometheus.MustNewConstMetric(c.perENI, prometheus.GaugeValue, float64(e.Assigned), e.ID)
		for _, r := range e.Ranges {
			ch <- prometheus.MustNewConstMetric(c.perRange, prometheus.GaugeValue, float64(r.Assigned), r.CIDR.String())
		}
	}
}
