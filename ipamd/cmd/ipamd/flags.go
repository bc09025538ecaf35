package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/vpccni/vpccni/cloud"
	awscloud "github.com/vpccni/vpccni/cloud/aws"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/awsenv"
	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/introspect"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/warmpool"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/releasequeue"
)

// Defaults that are not another package's.
const (
	defaultMetricsAddress = ":61678" // the reference's, on every interface
	envRecover            = "VPCCNI_RECOVER_FROM_KERNEL"
	envCooldown           = "IP_COOLDOWN_PERIOD"
	envIntrospection      = "INTROSPECTION_BIND_ADDRESS"
	envMetrics            = "METRICS_BIND_ADDRESS"
	envVethPrefix         = "AWS_VPC_K8S_CNI_VETHPREFIX"
	envLogLevel           = "AWS_VPC_K8S_CNI_LOGLEVEL"
	envLogFile            = "AWS_VPC_K8S_CNI_LOG_FILE"
	envNoProvisioning     = "DISABLE_NETWORK_RESOURCE_PROVISIONING"
	envNoLeakedENICleanup = "DISABLE_LEAKED_ENI_CLEANUP"
	envENIMTU             = "AWS_VPC_ENI_MTU"
)

// flags are ipamd's parsed command line over its environment.
type flags struct {
	socket, cloudKind, instanceType, memoryStart, region, ec2Endpoint string
	level, format, logFile                                            string
	strict, ipv6, version                                             bool
	checkpoint                                                        string
	recover                                                           bool
	cooldown                                                          time.Duration
	reconcile                                                         bool
	reconcileInterval, reconcileGrace                                 time.Duration
	leakSweepInterval, leakSweepMinAge                                time.Duration
	vethPrefix                                                        string
	introspection, metricsAddr                                        string
	allowNonLoopback, noIntrospection, noMetrics                      bool
	noProvisioning                                                    bool
	eniMTU                                                            int
	eniTags                                                           map[string]string
	targets                                                           warmpool.Targets
	pe                                                                podENIFlags
	nat                                                               natFlags

	// registry holds this run's metrics; daemon is set once built, for the
	// pool gauges (read at scrape time).
	registry *prometheus.Registry
	daemon   atomic.Pointer[ipamd.Daemon]
}

// envSwitch reads one of vpccni's own switches as the reference's are
// read (strconv.ParseBool), false when unset.
func envSwitch(getenv func(string) string, name string) (bool, error) {
	s := getenv(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, s)
	}
	return b, nil
}

// parseFlags reads the command line; the reference's environment
// variables are the defaults. A malformed environment value is a usage
// error naming the variable.
func parseFlags(args []string, getenv func(string) string) (*flags, error) {
	targets, err := warmpool.TargetsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	cooldown := datastore.DefaultCooldown
	if s := getenv(envCooldown); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s=%q: want a whole number of seconds", envCooldown, s)
		}
		cooldown = time.Duration(n) * time.Second
	}
	// The reference's switches, read with strconv.ParseBool as it reads
	// them; a value it cannot read is refused (it would take the default).
	switches := map[string]bool{}
	for _, name := range []string{"ENABLE_IPv6", "ENABLE_IPv4", "DISABLE_INTROSPECTION", "DISABLE_METRICS", "ENABLE_POD_ENI", envNoProvisioning, envNoLeakedENICleanup} {
		b, err := awsenv.Bool(getenv, name)
		if err != nil {
			return nil, err
		}
		switches[name] = b
	}
	recoverFromKernel, err := envSwitch(getenv, envRecover)
	if err != nil {
		return nil, err
	}
	eniMTU, err := awsenv.Int(getenv, envENIMTU) // its range depends on --ipv6: checkRanges
	if err != nil {
		return nil, err
	}
	eniTags, err := awsenv.Tags(getenv, "ADDITIONAL_ENI_TAGS")
	if err != nil {
		return nil, err
	}
	if name := awsenv.Str(getenv, "CLUSTER_NAME"); name != "" {
		if eniTags == nil {
			eniTags = map[string]string{}
		}
		eniTags[cloud.TagClusterName] = name
	}
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	f := &flags{targets: targets, eniTags: eniTags}
	fs := flag.NewFlagSet("ipamd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller, help by usage
	fs.StringVar(&f.socket, "socket", ipamd.DefaultSocket, "")
	fs.StringVar(&f.cloudKind, "cloud", "memory", "")
	fs.StringVar(&f.instanceType, "instance-type", "m5.large", "")
	fs.StringVar(&f.memoryStart, "memory-start", "full", "")
	fs.StringVar(&f.region, "region", getenv("AWS_REGION"), "")
	fs.StringVar(&f.ec2Endpoint, "ec2-endpoint", getenv("AWS_EC2_ENDPOINT"), "")
	fs.StringVar(&f.level, "log-level", or(envLogLevel, "info"), "")
	fs.StringVar(&f.logFile, "log-file", or(envLogFile, "stderr"), "")
	fs.StringVar(&f.format, "log-format", "text", "")
	fs.BoolVar(&f.strict, "reject-version-mismatch", false, "")
	fs.BoolVar(&f.ipv6, "ipv6", switches["ENABLE_IPv6"], "")
	fs.BoolVar(&f.version, "version", false, "")
	fs.StringVar(&f.checkpoint, "checkpoint", or(checkpoint.EnvPath, checkpoint.DefaultPath), "")
	fs.BoolVar(&f.recover, "recover-from-kernel", recoverFromKernel, "")
	fs.DurationVar(&f.cooldown, "ip-cooldown", cooldown, "")
	fs.BoolVar(&f.reconcile, "reconcile", true, "")
	fs.DurationVar(&f.reconcileInterval, "reconcile-interval", ipamd.DefaultReconcileInterval, "")
	fs.DurationVar(&f.reconcileGrace, "reconcile-grace", ipamd.DefaultReconcileGrace, "")
	fs.StringVar(&f.vethPrefix, "veth-prefix", or(envVethPrefix, ownership.DefaultVethPrefix), "")
	fs.StringVar(&f.introspection, "introspection-address", or(envIntrospection, introspect.DefaultAddress), "")
	fs.BoolVar(&f.allowNonLoopback, "allow-nonloopback-introspection", false, "")
	fs.BoolVar(&f.noIntrospection, "disable-introspection", switches["DISABLE_INTROSPECTION"], "")
	fs.StringVar(&f.metricsAddr, "metrics-address", or(envMetrics, defaultMetricsAddress), "")
	fs.BoolVar(&f.noMetrics, "disable-metrics", switches["DISABLE_METRICS"], "")
	fs.BoolVar(&f.noProvisioning, "disable-provisioning", switches[envNoProvisioning], "")
	sweepEvery := ipamd.DefaultLeakSweep.Interval
	if switches[envNoLeakedENICleanup] {
		sweepEvery = 0
	}
	fs.DurationVar(&f.leakSweepInterval, "leaked-eni-sweep-interval", sweepEvery, "")
	fs.DurationVar(&f.leakSweepMinAge, "leaked-eni-min-age", ipamd.DefaultLeakSweep.MinAge, "")
	fs.IntVar(&f.eniMTU, "eni-mtu", eniMTU, "")
	fs.IntVar(&f.targets.WarmENI, "warm-eni-target", targets.WarmENI, "")
	fs.IntVar(&f.targets.WarmIP, "warm-ip-target", targets.WarmIP, "")
	fs.IntVar(&f.targets.MinimumIP, "minimum-ip-target", targets.MinimumIP, "")
	fs.IntVar(&f.targets.WarmPrefix, "warm-prefix-target", targets.WarmPrefix, "")
	fs.BoolVar(&f.targets.PrefixDelegation, "enable-prefix-delegation", targets.PrefixDelegation, "")
	fs.IntVar(&f.targets.MaxENI, "max-eni", targets.MaxENI, "")
	fs.BoolVar(&f.pe.enabled, "enable-pod-eni", switches["ENABLE_POD_ENI"], "")
	fs.StringVar(&f.pe.source, "pod-eni-source", sourceKubernetes, "")
	fs.StringVar(&f.pe.file, "pod-eni-file", "", "")
	fs.StringVar(&f.pe.kubeconfig, "kubeconfig", "", "")
	if err := f.nat.register(fs, getenv); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	// ENABLE_IPv4, when set, must say the other family than --ipv6 (or
	// ENABLE_IPv6): the reference refuses both and neither. Unset, it is
	// whatever --ipv6 leaves.
	if getenv("ENABLE_IPv4") != "" && switches["ENABLE_IPv4"] == f.ipv6 {
		return nil, fmt.Errorf("ENABLE_IPv4=%s with IPv6 %s: exactly one of ENABLE_IPv4 and ENABLE_IPv6 (--ipv6) must be true",
			getenv("ENABLE_IPv4"), map[bool]string{true: "on", false: "off"}[f.ipv6])
	}
	if err := f.pe.check(set); err != nil {
		return nil, err
	}
	if err := f.checkRanges(); err != nil {
		return nil, err
	}
	if err := ownership.ValidatePrefix(f.vethPrefix); err != nil {
		return nil, fmt.Errorf("--veth-prefix: %w", err)
	}
	if _, err := f.nat.rules(f.vethPrefix); err != nil {
		return nil, err
	}
	switch f.cloudKind {
	case "memory":
		if f.memoryStart != "full" && f.memoryStart != "fresh" {
			return nil, fmt.Errorf("--memory-start %q: want full or fresh", f.memoryStart)
		}
	case "aws":
		if set["instance-type"] || set["memory-start"] {
			return nil, errors.New("--instance-type and --memory-start are for --cloud memory: with --cloud aws the instance is the one ipamd runs on")
		}
	default:
		return nil, fmt.Errorf("--cloud %q: want \"memory\" or \"aws\"", f.cloudKind)
	}
	return f, nil
}

// Count ranges of the warm-pool flags: no instance type has more than 15
// ENIs or 50 addresses per ENI (750 addresses, 49 /28s per ENI); the
// bounds leave room and refuse what can only be a typo.
var (
	warmENIRange    = ipamd.CountRange{Min: 0, Max: 100}
	warmIPRange     = ipamd.CountRange{Min: 0, Max: 10000}
	minimumIPRange  = ipamd.CountRange{Min: 0, Max: 10000}
	warmPrefixRange = ipamd.CountRange{Min: 0, Max: 1000}
	maxENIRange     = ipamd.CountRange{Min: -1, Max: 100}
)

// checkRanges refuses a duration or count out of its documented range,
// naming the flag (the environment variable it defaults from), the value
// and the range. A value is never silently replaced by a default.
func (f *flags) checkRanges() error {
	durations := []struct {
		flag string
		v    time.Duration
		r    ipamd.DurationRange
	}{
		{"--reconcile-interval", f.reconcileInterval, ipamd.ReconcileIntervalRange},
		{"--reconcile-grace", f.reconcileGrace, ipamd.ReconcileGraceRange},
		{"--ip-cooldown (IP_COOLDOWN_PERIOD)", f.cooldown, ipamd.CooldownRange},
	}
	if f.leakSweepInterval != 0 { // (0: no sweep)
		durations = append(durations, []struct {
			flag string
			v    time.Duration
			r    ipamd.DurationRange
		}{
			{"--leaked-eni-sweep-interval", f.leakSweepInterval, ipamd.LeakSweepIntervalRange},
			{"--leaked-eni-min-age", f.leakSweepMinAge, ipamd.LeakSweepMinAgeRange},
		}...)
	}
	for _, d := range durations {
		if err := d.r.Check(d.flag, d.v); err != nil {
			return usageError{err}
		}
	}
	counts := []struct {
		flag string
		v    int
		r    ipamd.CountRange
	}{
		{"--warm-eni-target (WARM_ENI_TARGET)", f.targets.WarmENI, warmENIRange},
		{"--warm-ip-target (WARM_IP_TARGET)", f.targets.WarmIP, warmIPRange},
		{"--minimum-ip-target (MINIMUM_IP_TARGET)", f.targets.MinimumIP, minimumIPRange},
		{"--warm-prefix-target (WARM_PREFIX_TARGET)", f.targets.WarmPrefix, warmPrefixRange},
		{"--max-eni (MAX_ENI)", f.targets.MaxENI, maxENIRange},
	}
	for _, c := range counts {
		if err := c.r.Check(c.flag, c.v); err != nil {
			return usageError{err}
		}
	}
	// 0 (by the flag only: the variable's range is the reference's)
	// leaves the ENIs' MTU as it is.
	if f.eniMTU != 0 {
		if err := awsenv.CheckMTU(f.eniMTU, f.ipv6); err != nil {
			return usageError{fmt.Errorf("--eni-mtu (%s) %d: %w", envENIMTU, f.eniMTU, err)}
		}
	}
	return nil
}

// daemonConfig builds the daemon's configuration: the cloud, the node
// namespace's kernel handle, the pod-ENI source, metrics. cleanup closes
// what it opened and is never nil.
func (f *flags) daemonConfig(log *slog.Logger) (ipamd.Config, func(), error) {
	var closers []func()
	cleanup := func() {
		for _, c := range closers {
			c()
		}
	}
	cfg := ipamd.Config{SocketPath: f.socket, Logger: log, Version: buildVersion, RejectVersionMismatch: f.strict,
		IPv6: f.ipv6, Checkpoint: f.checkpoint, ReleaseQueue: releasequeue.DirFor(f.socket), Restore: ipamd.RestorePolicy{AdoptOnMissing: true, RecoverCorrupt: f.recover},
		Cooldown: f.cooldown, Reconcile: f.reconcile, ReconcileInterval: f.reconcileInterval, ReconcileGrace: f.reconcileGrace,
		LeakSweep: ipamd.LeakSweep{Interval: f.leakSweepInterval, MinAge: f.leakSweepMinAge},
		Targets:   f.targets, ENIMTU: f.eniMTU, VethPrefixes: []string{f.vethPrefix, ownership.StrictVethPrefix}}
	// Nothing but in the test-only "legacydelete" build.
	if err := legacyProfile(&cfg); err != nil {
		return cfg, cleanup, err
	}
	if !f.noMetrics {
		f.registry = prometheus.NewRegistry()
		f.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		m, err := metrics.New(f.registry, func() metrics.PoolStats {
			if d := f.daemon.Load(); d != nil {
				return d.PoolStats()
			}
			return metrics.PoolStats{}
		})
		if err == nil {
			err = metrics.BuildInfo(f.registry, buildVersion)
		}
		if err != nil {
			return cfg, cleanup, err
		}
		cfg.Metrics = m
	}
	inst, err := f.cloud(&cfg)
	if err != nil {
		return cfg, cleanup, err
	}
	if f.noProvisioning {
		// The ENIs and addresses attached now are the pool: no warm pool
		// to attach, assign or give back (the reference's
		// DISABLE_NETWORK_RESOURCE_PROVISIONING).
		cfg.Inventory, cfg.Cloud = cfg.Cloud, nil
	}
	useKernel, why := f.kernelAllowed()
	if useKernel {
		h, err := linux.Opener{}.Open("")
		if err != nil {
			return cfg, cleanup, fmt.Errorf("open ipamd's network namespace: %w", err)
		}
		closers = append(closers, func() { h.Close() })
		cfg.Kernel, cfg.StandInLinks = h, f.cloudKind == "memory"
		// Nothing to translate in IPv6 mode. With external SNAT and
		// without node ports nothing is wanted, but what an earlier run
		// made is removed, when iptables is there to do it.
		if !f.ipv6 {
			cfg.HostNAT, err = f.nat.hostNAT(f.vethPrefix)
			if err != nil && f.nat.external && !f.nat.nodePort {
				log.Warn("no host NAT rules are wanted, and none left by an earlier run can be removed", "error", err)
			} else if err != nil {
				return cfg, cleanup, err
			}
		}
	} else {
		log.Warn("not touching the kernel: no ENI host networking, no reconciler, no recovery from the kernel", "why", why)
	}
	src, err := f.pe.sourceOf(buildVersion)
	if err != nil {
		return cfg, cleanup, err
	}
	if src != nil {
		cfg.PodENI, cfg.TrunkLinkIndex = src, trunkLinkIndex(inst, f.cloudKind)
	}
	return cfg, cleanup, nil
}

// cloud sets cfg.Cloud from --cloud and returns the instance as it is now.
func (f *flags) cloud(cfg *ipamd.Config) (cloud.Instance, error) {
	ctx := context.Background()
	switch f.cloudKind {
	case "aws":
		ec2, md, err := awscloud.New(ctx, awscloud.Options{Region: f.region, EndpointURL: f.ec2Endpoint})
		if err != nil {
			return cloud.Instance{}, err
		}
		cfg.Cloud = cloud.NewProvider(cloud.Instrument(ec2, f.observeEC2(cfg)), md, cloud.ProviderOptions{ENITags: f.eniTags})
	default:
		// The trunk ENI is what the VPC resource controller attaches to a
		// node with security groups for pods; the memory cloud does the same.
		c, err := memory.NewWithOptions(f.instanceType, memory.Options{Trunk: f.pe.enabled, Bare: f.memoryStart == "fresh",
			Provider: cloud.ProviderOptions{ENITags: f.eniTags}})
		if err != nil {
			return cloud.Instance{}, usageError{fmt.Errorf("--instance-type: %w", err)}
		}
		// The same request building and parsing as on AWS, and the same
		// EC2 call metrics.
		cfg.Cloud = cloud.NewProvider(cloud.Instrument(c, f.observeEC2(cfg)), c, cloud.ProviderOptions{ENITags: f.eniTags})
	}
	return cfg.Cloud.Instance(ctx)
}

// observeEC2 feeds EC2 calls to the metrics, once they exist.
func (f *flags) observeEC2(cfg *ipamd.Config) func(api string, err error, d time.Duration) {
	return func(api string, err error, d time.Duration) { cfg.Metrics.EC2Call(api, err, d) }
}

// serveHTTP starts introspection and metrics as configured; ctx ends them.
func (f *flags) serveHTTP(ctx context.Context, d *ipamd.Daemon, cfg ipamd.Config, log *slog.Logger) error {
	if !f.noIntrospection {
		// Serve logs the address it listens on.
		if _, err := introspect.Serve(ctx, introspect.Config{Address: f.introspection, AllowNonLoopback: f.allowNonLoopback,
			Source: d.Introspection(), Log: log}); err != nil {
			return fmt.Errorf("introspection: %w", err)
		}
	}
	if f.noMetrics || cfg.Metrics == nil {
		return nil
	}
	l, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", f.metricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(f.registry))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second}
	go srv.Serve(l)
	go func() { <-ctx.Done(); srv.Close() }()
	log.Info("metrics serving", "address", l.Addr().String(), "path", "/metrics")
	return nil
}

// kernelAllowed says whether ipamd may configure its network namespace.
// On AWS it runs in the node's own namespace (hostNetwork) and must. The
// memory cloud makes stand-in links, routes and rules, which must never
// land in the namespace of the machine ipamd is tried on: it touches the
// kernel only inside a named namespace (one `ip netns add` made, as
// `ip netns exec NODE ipamd …` and the test suites run it). PID 1's
// namespace is no guide: in a sandbox the machine's own namespace is not
// PID 1's.
func (f *flags) kernelAllowed() (bool, string) {
	if f.cloudKind == "aws" {
		return true, ""
	}
	if name, ok := namedNamespace(); ok {
		return true, "network namespace " + name
	}
	return false, "--cloud memory outside a named network namespace (this may be the machine's own); run ipamd in one: ip netns exec NODE ipamd …"
}

// netnsDir is where `ip netns` bind-mounts named namespaces.
const netnsDir = "/var/run/netns"

// namedNamespace returns the name of the named namespace this process is
// in, if it is in one.
func namedNamespace() (string, bool) {
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		return "", false
	}
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(netnsDir, e.Name()), &st); err == nil && st.Dev == self.Dev && st.Ino == self.Ino {
			return e.Name(), true
		}
	}
	return "", false
}
