package ipamd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/podeni"
)

// withMetrics gives cfg metrics on a fresh registry whose pool gauges
// read the daemon set in the returned pointer, as the binary wires them.
func withMetrics(t *testing.T, cfg *Config) (*prometheus.Registry, *atomic.Pointer[Daemon]) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var d atomic.Pointer[Daemon]
	m, err := metrics.New(reg, func() metrics.PoolStats {
		if d := d.Load(); d != nil {
			return d.PoolStats()
		}
		return metrics.PoolStats{}
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	return reg, &d
}

// metricDaemon is a daemon on an m5.large with metrics, not started.
func metricDaemon(t *testing.T, cfg Config, opts ...Option) (*Daemon, *prometheus.Registry) {
	t.Helper()
	reg, p := withMetrics(t, &cfg)
	d := newDaemon(t, sockPath(t), "m5.large", cfg, opts...)
	p.Store(d)
	return d, reg
}

// sample is the value of the series of name with exactly labels: a
// gauge's or counter's value, a histogram's observation count. ok is
// false when there is no such series.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelsAre(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func labelsAre(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// wantSample fails the test unless the series exists with value want.
func wantSample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := sample(t, g, name, labels)
	if !ok {
		t.Errorf("no series %s%v", name, labels)
	} else if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func fn(name string) map[string]string { return map[string]string{"fn": name} }

// TestAssignedIPPerENIAndCIDR: each ENI and each of its /32s is a series
// of the pool as it is at the scrape; an ENI gone from the pool leaves no
// series behind.
func TestAssignedIPPerENIAndCIDR(t *testing.T) {
	d, reg := metricDaemon(t, Config{})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := client(t, d.cfg.SocketPath)
	r, err := c.AddNetwork(ctx(t), addReq("web"))
	if err != nil || !r.Success {
		t.Fatal(r, err)
	}
	ip := netip.MustParseAddr(r.IPAllocationMetadata[0].IPv4Addr)
	var holder, idle datastore.ENIInfo
	for _, e := range d.Datastore().ENIs() {
		for _, a := range e.IPv4 {
			if a == ip {
				holder = e
			}
		}
		if e.Device == 2 {
			idle = e
		}
	}
	if holder.ID == "" || idle.ID == "" || holder.ID == idle.ID {
		t.Fatalf("pod address %s on %q; device 2 is %q", ip, holder.ID, idle.ID)
	}
	perENI := func(id string) map[string]string { return map[string]string{"eni": id} }
	perCIDR := func(p string) map[string]string { return map[string]string{"cidr": p} }
	wantSample(t, reg, "awscni_assigned_ip_per_eni", perENI(holder.ID), 1)
	wantSample(t, reg, "awscni_assigned_ip_per_eni", perENI(idle.ID), 0)
	wantSample(t, reg, "awscni_assigned_ip_per_cidr", perCIDR(ip.String()+"/32"), 1)
	wantSample(t, reg, "awscni_assigned_ip_per_cidr", perCIDR(idle.IPv4[0].String()+"/32"), 0)

	if r, err := c.DelNetwork(ctx(t), delReq("web")); err != nil || !r.Success {
		t.Fatal(r, err)
	}
	wantSample(t, reg, "awscni_assigned_ip_per_eni", perENI(holder.ID), 0)
	wantSample(t, reg, "awscni_assigned_ip_per_cidr", perCIDR(ip.String()+"/32"), 0)

	if _, err := d.Datastore().RemoveENI(idle.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := sample(t, reg, "awscni_assigned_ip_per_eni", perENI(idle.ID)); ok {
		t.Errorf("removed ENI %s still has a series", idle.ID)
	}
	for _, a := range idle.IPv4 {
		if _, ok := sample(t, reg, "awscni_assigned_ip_per_cidr", perCIDR(a.String()+"/32")); ok {
			t.Errorf("address %s of the removed ENI still has a series", a)
		}
	}
}

// TestAssignedIPPerCIDRCountsPrefixes: a delegated prefix is one range,
// counting every pod address in it, IPv4 /28 and IPv6 alike.
func TestAssignedIPPerCIDRCountsPrefixes(t *testing.T) {
	t.Run("ipv4 prefix", func(t *testing.T) {
		d, reg := metricDaemon(t, Config{})
		pfx := netip.MustParsePrefix("10.0.64.16/28")
		if err := d.Datastore().AddENI(cloud.ENI{ID: "eni-pfx", DeviceNumber: 5, IPv4Prefixes: []netip.Prefix{pfx}}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			key := datastore.Key{NetworkName: "aws-cni", ContainerID: fmt.Sprint("c", i), IfName: "eth0"}
			if _, err := d.Datastore().Assign(key, datastore.Meta{}, datastore.IPv4, 5); err != nil {
				t.Fatal(err)
			}
		}
		wantSample(t, reg, "awscni_assigned_ip_per_cidr", map[string]string{"cidr": pfx.String()}, 2)
		wantSample(t, reg, "awscni_assigned_ip_per_eni", map[string]string{"eni": "eni-pfx"}, 2)
	})
	t.Run("ipv6 prefix", func(t *testing.T) {
		d, reg := metricDaemon(t, Config{IPv6: true})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		c := client(t, d.cfg.SocketPath)
		for _, id := range []string{"a", "b"} {
			if r, err := c.AddNetwork(ctx(t), addReq(id)); err != nil || !r.Success {
				t.Fatal(r, err)
			}
		}
		primary := d.Datastore().ENIs()[0]
		if len(primary.IPv6Prefixes) == 0 {
			t.Fatalf("the primary ENI has no IPv6 prefix: %+v", primary)
		}
		wantSample(t, reg, "awscni_assigned_ip_per_cidr", map[string]string{"cidr": primary.IPv6Prefixes[0].String()}, 2)
		wantSample(t, reg, "awscni_assigned_ip_per_eni", map[string]string{"eni": primary.ID}, 2)
	})
}

// gatedTables is MemTables whose List blocks while gate is set, so a
// host NAT pass can be caught under way.
type gatedTables struct {
	*hostnat.MemTables
	gate    atomic.Pointer[chan struct{}]
	entered chan struct{}
	fail    atomic.Bool
}

func (g *gatedTables) List(table, chain string) ([]string, error) {
	if ch := g.gate.Load(); ch != nil {
		g.entered <- struct{}{}
		<-*ch
	}
	if g.fail.Load() {
		return nil, errors.New("iptables: resource temporarily unavailable")
	}
	return g.MemTables.List(table, chain)
}

// TestHostNATMetrics: each host NAT pass is counted by result, is an
// action in progress while it runs, and makes iptables the connmark
// backend; a node without host NAT reports no backend and no pass.
func TestHostNATMetrics(t *testing.T) {
	n := newNode(t)
	tb := &gatedTables{MemTables: hostnat.NewMemTables(), entered: make(chan struct{}, 1)}
	rules := hostnat.Config{Randomize: hostnat.RandomNone, Mark: hostnat.DefaultMark, VethPrefix: "eni"}
	d, reg := metricDaemon(t, Config{Kernel: n.h, StandInLinks: true, HostNAT: &HostNAT{Tables: tb, Rules: rules}}, WithManualLoops())
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	const passes = "awscni_connmark_reconcile_total"
	wantSample(t, reg, passes, map[string]string{"result": "success"}, 1)
	wantSample(t, reg, passes, map[string]string{"result": "error"}, 0)
	wantSample(t, reg, "awscni_connmark_backend", map[string]string{"backend": "iptables"}, 1)

	gate := make(chan struct{})
	tb.gate.Store(&gate)
	done := make(chan error)
	go func() { done <- d.syncHostNAT() }()
	<-tb.entered
	wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnHostNATSync), 1)
	tb.gate.Store(nil)
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnHostNATSync), 0)
	wantSample(t, reg, passes, map[string]string{"result": "success"}, 2)

	tb.fail.Store(true)
	if err := d.syncHostNAT(); err == nil {
		t.Fatal("a pass over failing tables succeeded")
	}
	wantSample(t, reg, passes, map[string]string{"result": "error"}, 1)
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnHostNATSync), 1)

	plain, plainReg := metricDaemon(t, Config{Kernel: newNode(t).h, StandInLinks: true}, WithManualLoops())
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Stop)
	wantSample(t, plainReg, passes, map[string]string{"result": "success"}, 0)
	if _, ok := sample(t, plainReg, "awscni_connmark_backend", map[string]string{"backend": "iptables"}); ok {
		t.Error("a node without host NAT reports a connmark backend")
	}
}

func startupLabels(success, withAPI, reason string) map[string]string {
	return map[string]string{"success": success, "with_api_server": withAPI, "failure_reason": reason}
}

// TestStartupMetrics: every Start is timed with its outcome and the step
// that failed; node initialization (ENIs and host NAT) on its own.
func TestStartupMetrics(t *testing.T) {
	const startup, nodeInit = "awscni_ipamd_startup_duration_seconds", "awscni_ipamd_node_initialization_duration_seconds"
	t.Run("success", func(t *testing.T) {
		d, reg := metricDaemon(t, Config{Kernel: newNode(t).h, StandInLinks: true, Checkpoint: ckptPath(t)}, WithManualLoops())
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		wantSample(t, reg, startup, startupLabels("true", "false", ""), 1)
		wantSample(t, reg, nodeInit, map[string]string{"success": "true"}, 1)
		wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnNodeInit), 0)
		wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnCheckpointRestore), 0)
		wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnNodeInit), 0)
	})
	t.Run("with the API server", func(t *testing.T) {
		d, reg := metricDaemon(t, Config{PodENI: podeni.Kubernetes{}})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		wantSample(t, reg, startup, startupLabels("true", "true", ""), 1)
	})
	t.Run("eni setup fails", func(t *testing.T) {
		// No stand-in links: the ENIs have no link to configure.
		d, reg := metricDaemon(t, Config{Kernel: newNode(t).h}, WithManualLoops())
		if err := d.Start(); err == nil {
			d.Stop()
			t.Fatal("started without the ENIs' links")
		}
		wantSample(t, reg, startup, startupLabels("false", "false", metrics.StartupENISetup), 1)
		wantSample(t, reg, nodeInit, map[string]string{"success": "false"}, 1)
		wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnNodeInit), 1)
		wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnNodeInit), 0)
	})
	t.Run("host nat fails", func(t *testing.T) {
		tb := &gatedTables{MemTables: hostnat.NewMemTables()}
		tb.fail.Store(true)
		d, reg := metricDaemon(t, Config{Kernel: newNode(t).h, StandInLinks: true,
			HostNAT: &HostNAT{Tables: tb, Rules: hostnat.Config{Randomize: hostnat.RandomNone, Mark: hostnat.DefaultMark, VethPrefix: "eni"}}}, WithManualLoops())
		if err := d.Start(); err == nil {
			d.Stop()
			t.Fatal("started with failing tables")
		}
		wantSample(t, reg, startup, startupLabels("false", "false", metrics.StartupHostNAT), 1)
		wantSample(t, reg, nodeInit, map[string]string{"success": "false"}, 1)
	})
	t.Run("checkpoint corrupt", func(t *testing.T) {
		path := ckptPath(t)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{"version":`), 0o600); err != nil {
			t.Fatal(err)
		}
		d, reg := metricDaemon(t, Config{Checkpoint: path})
		err := d.Start()
		if err == nil {
			d.Stop()
			t.Fatal("started on a corrupt checkpoint")
		}
		wantSample(t, reg, startup, startupLabels("false", "false", metrics.StartupCheckpoint), 1)
		wantSample(t, reg, nodeInit, map[string]string{"success": "true"}, 1)
		wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnCheckpointRestore), 1)
	})
	t.Run("socket", func(t *testing.T) {
		cfg := Config{}
		reg, p := withMetrics(t, &cfg)
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		d := newDaemon(t, filepath.Join(file, "ipamd.sock"), "m5.large", cfg) // its directory is a file
		p.Store(d)
		if err := d.Start(); err == nil {
			d.Stop()
			t.Fatal("started on a socket path under a file")
		}
		wantSample(t, reg, startup, startupLabels("false", "false", metrics.StartupSocket), 1)
	})
}

// TestActionErrorMetrics: a failed checkpoint commit, reconciler release
// or warm-pool action is counted under its fn, and nothing is left in
// progress.
func TestActionErrorMetrics(t *testing.T) {
	d, reg := metricDaemon(t, Config{Checkpoint: ckptPath(t)}, WithManualLoops())
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.commit(gone); err == nil {
		t.Fatal("a commit for a caller gone succeeded")
	}
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnCheckpointCommit), 1)
	wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnCheckpointCommit), 0)

	if err := (poolView{d}).Release("not a key"); err == nil {
		t.Fatal("a malformed holder was released")
	}
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnReconcileRelease), 1)
	wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnReconcileRelease), 0)

	d.observePool("alloc-eni", nil)
	d.observePool("alloc-eni", errors.New("InsufficientFreeAddressesInSubnet"))
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnWarmPoolAction), 1)
}

// TestPodENIErrorMetrics: each refused branch-ENI pod is counted by the
// step that failed; a pod that is gone is no error.
func TestPodENIErrorMetrics(t *testing.T) {
	src := staticWithSG()
	src.Fail("default", "pod-err", errors.New("the server is currently unable to handle the request"))
	src.Fail("default", "pod-gone", fmt.Errorf("%w: default/pod-gone", podeni.ErrPodNotFound))
	bad := sgENI()
	bad.IPv4 = netip.Addr{}
	src.Set("default", "pod-nov4", bad)
	var indexErr atomic.Bool
	cfg := Config{TrunkLinkIndex: func() (int, error) {
		if indexErr.Load() {
			return 0, errors.New("no link with that MAC")
		}
		return trunkIfIndex, nil
	}}
	reg, p := withMetrics(t, &cfg)
	d, c := startBranch(t, src, cfg)
	p.Store(d)

	if r, err := c.AddNetwork(ctx(t), addReq("err")); err != nil || r.Success {
		t.Fatal(r, err)
	}
	if _, err := c.DelNetwork(ctx(t), delReq("err")); err == nil {
		t.Fatal("DEL with a failing lookup succeeded")
	}
	wantSample(t, reg, "awscni_pod_eni_error_count", fn(metrics.PodENILookup), 2)

	if r, err := c.AddNetwork(ctx(t), addReq("nov4")); err != nil || r.Success {
		t.Fatal(r, err)
	}
	if _, err := c.DelNetwork(ctx(t), delReq("nov4")); err == nil {
		t.Fatal("DEL of an unusable branch ENI succeeded")
	}
	wantSample(t, reg, "awscni_pod_eni_error_count", fn(metrics.PodENIInvalid), 2)

	indexErr.Store(true)
	if r, err := c.AddNetwork(ctx(t), addReq("sg")); err != nil || r.Success {
		t.Fatal(r, err)
	}
	wantSample(t, reg, "awscni_pod_eni_error_count", fn(metrics.PodENINoTrunk), 1)

	// An instance without a trunk ENI.
	plainCfg := Config{PodENI: staticWithSG(), TrunkLinkIndex: func() (int, error) { return trunkIfIndex, nil }}
	plainReg, _ := withMetrics(t, &plainCfg)
	sock := sockPath(t)
	start(t, sock, plainCfg)
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("sg")); err != nil || r.Success {
		t.Fatal(r, err)
	}
	wantSample(t, plainReg, "awscni_pod_eni_error_count", fn(metrics.PodENINoTrunk), 1)

	if r, err := c.DelNetwork(ctx(t), delReq("gone")); err != nil || !r.Success {
		t.Fatal(r, err)
	}
	wantSample(t, reg, "awscni_pod_eni_error_count", fn(metrics.PodENILookup), 2)
}

// TestReconcilePassMetrics: a reconciler pass that fails (its caller
// gone) is counted under reconcilePass and leaves nothing in progress.
func TestReconcilePassMetrics(t *testing.T) {
	n := newNode(t)
	d, reg := metricDaemon(t, Config{Kernel: n.h, StandInLinks: true, Reconcile: true}, WithManualLoops())
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnReconcilePass), 0)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	d.reconcileOnce(gone)
	wantSample(t, reg, "awscni_ipamd_error_count", fn(metrics.FnReconcilePass), 1)
	wantSample(t, reg, "awscni_ipamd_action_inprogress", fn(metrics.FnReconcilePass), 0)
}
