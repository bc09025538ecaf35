// Package ipamd is the IP address management daemon: it holds the node's
// pool of pod addresses and serves the plugin's AddNetwork and DelNetwork
// calls over gRPC on a root-only Unix socket, with the standard gRPC health
// service beside them. It keeps its allocations in a checkpoint file (the
// reference's format), restores them on start, keeps the pool at its warm
// targets through the cloud, and reconciles: what a DEL missed it releases
// and cleans up itself. The Daemon runs in-process too (the scenario
// harness starts, kills and restarts it on a real socket).
package ipamd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/eninet"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
	"github.com/vpccni/vpccni/ipamd/warmpool"
	"github.com/vpccni/vpccni/kernel"
)

// DefaultSocket is where the reference's ipamd listens since v1.23.
const DefaultSocket = "/var/run/aws-node/ipamd.sock"

// HealthService is the service name the reference marks SERVING, besides
// the empty name its probes check.
const HealthService = "grpc.health.v1.aws-node"

// Defaults of the background loops.
const (
	DefaultReconcileInterval = 60 * time.Second // the reference's pool reconcile period
	DefaultReconcileGrace    = 60 * time.Second // an ADD assigns before it makes the veth
)

// Config configures a Daemon.
type Config struct {
	// SocketPath is the Unix socket to serve on; empty means DefaultSocket.
	SocketPath string
	// Inventory describes the instance and its ENIs: a fixed pool. Cloud,
	// when set, replaces it and the warm pool manages the ENIs and
	// addresses through it.
	Inventory cloud.Inventory
	Cloud     cloud.Provider
	// Targets are the warm-pool settings (with Cloud).
	Targets warmpool.Targets
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Version is this build's version; ClientVersion is compared with it.
	Version string
	// RejectVersionMismatch makes a ClientVersion other than Version a
	// FailedPrecondition, as the reference does. Off by default: a node
	// that mixes plugin and daemon builds during an upgrade keeps working.
	RejectVersionMismatch bool
	// IPv6 hands pods /128s from the primary ENI's delegated prefix instead
	// of IPv4 addresses (the reference's ENABLE_IPv6, which requires prefix
	// delegation).
	IPv6 bool
	// PodENI, when set, enables branch ENIs (security groups for pods, the
	// reference's ENABLE_POD_ENI): every AddNetwork first asks it whether
	// the pod has a branch ENI, and a DelNetwork of a key the datastore
	// does not hold asks it what to tear down. Nil disables them.
	PodENI podeni.Source
	// TrunkLinkIndex is how the daemon learns the trunk ENI's link index
	// in the node namespace, which the plugin needs to put the pod's VLAN
	// on. It is asked on every branch-pod ADD, so a trunk attached (or a
	// link renamed) after startup is found. The binary resolves it by the
	// trunk ENI's MAC (TrunkIndexByMAC); nil means unknown, and branch pods
	// are then refused.
	TrunkLinkIndex func() (int, error)

	// Kernel is the node namespace (ipamd's own). With it ipamd configures
	// its ENIs' host networking, checks restored allocations against the
	// pods' veths, and reconciles; nil (unit tests) skips all three.
	Kernel kernel.API
	// StandInLinks makes a link for an attached ENI that has none (--cloud
	// memory: no hypervisor makes them).
	StandInLinks bool
	// ENIMTU, when not 0, is the MTU of every ENI's link, the primary's
	// too (AWS_VPC_ENI_MTU).
	ENIMTU int
	// HostNAT, with Kernel, keeps the node's SNAT and connmark rules
	// (AWS_VPC_K8S_CNI_EXTERNALSNAT and its kin); nil leaves iptables
	// alone.
	HostNAT *HostNAT
	// VethPrefixes are the host veth prefixes pods may have (the plugin's
	// vethPrefix, "vlan" for strict branch pods); recovery from the kernel
	// recognises pods by them.
	VethPrefixes []string

	// Checkpoint is the checkpoint file; empty keeps allocations in memory
	// only (a restart forgets every pod).
	Checkpoint string
	// Restore decides what ipamd does with a missing or bad checkpoint.
	Restore RestorePolicy
	// ReleaseQueue is the directory where DELs that could not reach ipamd
	// queue their releases (package releasequeue; the binary's default is
	// beside the socket); Start drains it before serving. Empty: none.
	ReleaseQueue string
	// Cooldown is IP_COOLDOWN_PERIOD; zero means none.
	Cooldown time.Duration
	// Reconcile enables the reconciler (vpccni; the reference has none).
	Reconcile         bool
	ReconcileInterval time.Duration
	ReconcileGrace    time.Duration
	// LeakSweep, with Cloud, deletes ENIs leaked in EC2 (leaksweep.go);
	// the zero value sweeps nothing.
	LeakSweep LeakSweep
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	// Metrics, when set, is fed by every component.
	Metrics *metrics.Metrics
}

// Limits bound the gRPC server, so that a client that opens many
// connections, sends a huge message, opens streams and never finishes
// them, or connects and says nothing cannot exhaust ipamd's memory,
// goroutines or descriptors, and cannot keep other clients out forever.
// Only root and its group can reach the socket, so these are a defence
// against buggy or leaking clients (a stuck agent, a plugin build that
// leaks connections) more than against an attacker. A legitimate client
// is tiny and brief: the plugin opens one connection per invocation,
// makes one call of a few hundred bytes and closes it.
type Limits struct {
	// MaxConnections is how many connections are served at once. The next
	// connection waits in the listen backlog until one closes (as
	// netutil.LimitListener does): a burst of pod starts queues for a few
	// milliseconds instead of failing.
	MaxConnections int
	// MaxStreams is how many calls one connection may have in flight
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with
	// REFUSED_STREAM. With MaxConnections it bounds the handlers running.
	MaxStreams uint32
	// MaxRecvMsgSize bounds a request message; a larger one is refused
	// with ResourceExhausted before it is read into memory.
	MaxRecvMsgSize int
	// MaxHeaderListSize bounds a call's headers (metadata), which
	// MaxRecvMsgSize does not cover.
	MaxHeaderListSize uint32
	// HandshakeTimeout drops a connection that has not completed the
	// HTTP/2 handshake in time (one that connects and says nothing, or
	// trickles its preface), freeing its slot.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection with no call in flight for
	// this long. A client that does not answer the GOAWAY's ping is
	// closed 5 s later (grpc-go's fixed wait).
	MaxConnectionIdle time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace close any connection
	// after Age (±10% jitter) plus Grace, whatever it is doing: this ends
	// a call whose request never finishes arriving, which the idle timer
	// does not see. grpc clients reconnect transparently for new calls.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
}

// DefaultLimits are generous for the plugin's one small call per
// connection, and small next to what a node can give a daemon.
var DefaultLimits = Limits{
	MaxConnections: 128, // more than the concurrent CNI calls of a busy node; the rest queue
	MaxStreams:     16,  // the plugin makes one call per connection; probes one
	// A CNI request is a few hundred bytes: pod name and namespace (at most
	// 253 bytes each), container ID, netns path.
	MaxRecvMsgSize:    64 << 10,
	MaxHeaderListSize: 16 << 10,
	HandshakeTimeout:  5 * time.Second, // a local socket handshakes in microseconds
	MaxConnectionIdle: 30 * time.Second,
	// Age+grace ends any connection within about 2.5 minutes; no
	// legitimate call takes more than seconds.
	MaxConnectionAge:      2 * time.Minute,
	MaxConnectionAgeGrace: 30 * time.Second,
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	def := DefaultLimits
	if l.MaxConnections <= 0 {
		l.MaxConnections = def.MaxConnections
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = def.MaxStreams
	}
	if l.MaxRecvMsgSize <= 0 {
		l.MaxRecvMsgSize = def.MaxRecvMsgSize
	}
	if l.MaxHeaderListSize == 0 {
		l.MaxHeaderListSize = def.MaxHeaderListSize
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = def.HandshakeTimeout
	}
	if l.MaxConnectionIdle <= 0 {
		l.MaxConnectionIdle = def.MaxConnectionIdle
	}
	if l.MaxConnectionAge <= 0 {
		l.MaxConnectionAge = def.MaxConnectionAge
	}
	if l.MaxConnectionAgeGrace <= 0 {
		l.MaxConnectionAgeGrace = def.MaxConnectionAgeGrace
	}
	return l
}

// serverOptions are the grpc options that enforce l (all but
// MaxConnections, which is the listener's).
func (l Limits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.MaxHeaderListSize(l.MaxHeaderListSize),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
	}
}

// RestorePolicy is what ipamd does at start with its checkpoint.
type RestorePolicy struct {
	// AdoptOnMissing: with no checkpoint file, take back the addresses the
	// kernel shows pods still use (their host veth routes), instead of
	// starting blind and handing a live pod's address to the next one.
	AdoptOnMissing bool
	// RecoverCorrupt: a corrupt or unknown-version checkpoint is moved
	// aside and the allocations are rebuilt from the kernel; without it
	// ipamd refuses to start, naming the file and what is wrong.
	RecoverCorrupt bool
	// PruneStale: an allocation whose pod has no host veth is dropped and
	// its rules 512/1536 removed at once, as the reference (v1.13+) does.
	// vpccni instead leaves it to the reconciler, which waits out the ADD
	// grace period.
	PruneStale bool
}

// Daemon is a running (or stopped) ipamd.
type Daemon struct {
	cfg   Config
	opt   options // the harness's (Option); the binary passes none
	log   *slog.Logger
	inst  cloud.Instance // as the cloud described it at New
	store *datastore.Store
	pool  *warmpool.Manager     // nil without Cloud
	recon *reconcile.Reconciler // nil without Kernel or Reconcile
	eni   *eninet.Net           // nil without Kernel
	// ckpt is nil without Checkpoint and while stopped; handlers read it
	// without d.mu (Start holds d.mu while it reconciles, which commits).
	ckpt atomic.Pointer[checkpoint.Writer]

	restored bool // the checkpoint was read (first Start)
	// onCheckpointWrite counts writes in benchmarks.
	onCheckpointWrite func()
	reconMu           sync.Mutex
	reconciledAt      time.Time
	reconSettled      settledPass // guarded by reconMu
	natSettled        settledNAT  // guarded by reconMu
	sweep             sweepClock  // the next leaked-ENI sweep
	// the reaper of handed-over veths (reap.go)
	reapMu   sync.Mutex
	reapWake chan struct{}

	mu       sync.Mutex
	server   *grpc.Server
	health   *health.Server
	listener net.Listener
	done     chan struct{}
	stop     context.CancelFunc // background loops
	loops    sync.WaitGroup
}

// New describes the instance and builds the datastore over it. Nothing is
// read from disk or the kernel before Start.
func New(cfg Config, opts ...Option) (*Daemon, error) {
	if cfg.SocketPath == "" {
		cfg.SocketPath = DefaultSocket
	}
	if cfg.Cloud != nil {
		cfg.Inventory = cfg.Cloud
	}
	if cfg.Inventory == nil {
		return nil, errors.New("ipamd: no cloud inventory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := checkTiming(cfg); err != nil {
		return nil, err
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.ReconcileGrace == 0 {
		cfg.ReconcileGrace = DefaultReconcileGrace
	}
	inst, err := cfg.Inventory.Instance(context.Background())
	if err != nil {
		return nil, fmt.Errorf("ipamd: describe the instance: %w", err)
	}
	store, err := datastore.NewWithOptions(inst, datastore.Options{Cooldown: cfg.Cooldown, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("ipamd: instance %s: %w", inst.ID, err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d := &Daemon{cfg: cfg, opt: o, log: cfg.Logger, inst: inst, store: store, reapWake: make(chan struct{}, 1)}
	if cfg.Kernel != nil {
		d.eni = &eninet.Net{Kernel: cfg.Kernel, Log: cfg.Logger, StandIn: cfg.StandInLinks, MTU: cfg.ENIMTU}
		if cfg.Reconcile {
			d.recon = reconcile.New(reconcile.Config{Kernel: cfg.Kernel, Pool: poolView{d}, Grace: cfg.ReconcileGrace,
				Now: cfg.Now, Log: cfg.Logger})
		}
	}
	if cfg.Cloud != nil {
		var net warmpool.ENINet = noENINet{}
		if d.eni != nil {
			net = d.eni
		}
		limits := inst.Limits
		if limits.ENIs == 0 {
			limits, _ = cloud.LimitsOf(inst.Type)
		}
		d.pool = warmpool.New(store, cfg.Cloud, inst, warmpool.Config{Targets: cfg.Targets, Limits: limits, IPv6: cfg.IPv6,
			Now: cfg.Now, Log: cfg.Logger, Net: net, Observe: d.observePool})
	}
	return d, nil
}

// Start brings the node side up and serves: ENIs configured, the
// checkpoint restored and checked against the kernel, one reconcile pass,
// then the socket. Like the reference it creates the socket's directory
// (0755), removes a stale socket a killed ipamd left behind, and restricts
// the socket to root and its group (0660) before serving: any local
// process that can connect can take or free pod addresses. A stopped
// Daemon may be started again; it keeps its datastore (a new Daemon is a
// restarted process).
func (d *Daemon) Start() (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener != nil {
		return errors.New("ipamd: already started")
	}
	began := time.Now() // the real clock: Config.Now may be a simulated one
	defer func() { d.observeStartup(time.Since(began), err) }()
	if err := d.bringUp(); err != nil {
		if w := d.ckpt.Swap(nil); w != nil {
			w.Close() // the process does not come up: nothing more is written
		}
		return err
	}
	path := d.cfg.SocketPath
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("ipamd: socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ipamd: remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("ipamd: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return fmt.Errorf("ipamd: chmod socket: %w", err)
	}
	lim := d.opt.limits.withDefaults()
	d.server = grpc.NewServer(lim.serverOptions()...)
	rpcgrpc.RegisterCNIBackendServer(d.server, &handler{d: d})
	rpcgrpc.RegisterInventoryServer(d.server, &inventory{d: d})
	d.health = health.NewServer()
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	d.health.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(d.server, d.health)
	// d.listener stays the Unix listener (Kill needs it); the server gets
	// the bounded one, and closing that closes l.
	d.listener = l
	d.done = make(chan struct{})
	go func(s *grpc.Server, l net.Listener, done chan struct{}) {
		defer close(done)
		if err := s.Serve(l); err != nil {
			d.log.Error("serve", "error", err)
		}
	}(d.server, netutil.LimitListener(l, lim.MaxConnections), d.done)
	d.scheduleSweep(0)
	d.startLoops()
	st := d.store.Stats()
	// The one startup line: what an operator needs to tell which ipamd
	// this is and what it can hand out.
	trunk, hasTrunk := d.inst.Trunk()
	d.log.Info("ipamd serving", "socket", path, "instance", d.inst.ID, "instanceType", d.inst.Type,
		"enis", st.ENIs, "pool", st.Total, "assigned", st.Assigned, "version", d.cfg.Version,
		"checkpoint", d.cfg.Checkpoint, "warmPool", d.pool != nil, "reconciler", d.recon != nil,
		"podENI", d.cfg.PodENI != nil, "trunkENI", trunkAttr(trunk, hasTrunk))
	return nil
}

// bringUp runs once per Start, before serving. Its error is labelled
// with the step that failed, for the start-up metrics.
func (d *Daemon) bringUp() (err error) {
	steps := d.beginBringUp()
	defer func() { err = steps.end(err) }()
	if d.eni != nil {
		for _, e := range d.inst.ENIs {
			if err := d.eni.Setup(e); err != nil {
				return fmt.Errorf("ipamd: %w", err)
			}
		}
		steps.at(metrics.StartupHostNAT)
		if err := d.syncHostNAT(); err != nil {
			return err
		}
	}
	steps.nodeInitialized()
	steps.at(metrics.StartupCheckpoint)
	if d.cfg.Checkpoint != "" && d.ckpt.Load() == nil {
		// A Daemon restarted in-process keeps its memory; only a new one
		// (a new process) reads the checkpoint.
		if !d.restored {
			if err := d.restore(); err != nil {
				return err
			}
			d.restored = true
		}
		w := checkpoint.NewWriter(d.cfg.Checkpoint, d.checkpointFile,
			checkpoint.WriterOptions{PerCallSync: d.opt.perCallSync, OnWrite: d.observeCheckpoint})
		if err := w.Commit(context.Background()); err != nil {
			w.Close()
			return fmt.Errorf("ipamd: write the checkpoint: %w", err)
		}
		d.ckpt.Store(w)
	}
	// Before the reconciler and before serving: the queue says which
	// addresses are free for sure, the reconciler only judges.
	steps.at(metrics.StartupReleaseQueue)
	if err := d.drainReleaseQueue(); err != nil {
		return err
	}
	// Handed-over veths of the last run (their addresses still held):
	// deleted and released before the reconciler judges the pool.
	steps.at(metrics.StartupReap)
	if err := d.reapOnce(context.Background(), d.startupFault); err != nil {
		return err
	}
	if d.recon != nil {
		d.reconcileOnce(context.Background())
	}
	return nil
}

// Stop is a graceful shutdown (SIGTERM): health turns NOT_SERVING, calls
// in flight finish, new ones are refused, the checkpoint is written a last
// time, and the socket file is removed, so a client sees "no such file"
// rather than a hung socket. The datastore stays readable through
// Allocations and Datastore.
func (d *Daemon) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener == nil {
		return
	}
	d.health.Shutdown()
	d.server.GracefulStop()
	<-d.done
	d.stopLoops()
	if w := d.ckpt.Swap(nil); w != nil {
		if err := w.Commit(context.Background()); err != nil {
			d.log.Error("final checkpoint write failed", "checkpoint", d.cfg.Checkpoint, "error", err)
		}
		w.Close()
	}
	// Closing the listener already unlinks the file; removing it again
	// covers a listener that did not (and is a no-op otherwise).
	if err := os.Remove(d.cfg.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove socket", "socket", d.cfg.SocketPath, "error", err)
	}
	d.listener = nil
	d.log.Info("ipamd stopped", "socket", d.cfg.SocketPath, "assigned", d.store.Stats().Assigned)
}

// Kill is what SIGKILL does to the process, as seen from outside: every
// connection drops at once, calls in flight fail, and the socket file
// stays behind with nobody listening, so a client gets "connection
// refused". The memory goes with the process: what survives is what the
// checkpoint had; callers model the restart with a new Daemon.
func (d *Daemon) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener == nil {
		return
	}
	// A killed process never runs the close that would unlink the file;
	// Go's unix listener unlinks on Close unless told not to.
	if ul, ok := d.listener.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	d.server.Stop()
	<-d.done
	d.stopLoops()
	if w := d.ckpt.Swap(nil); w != nil {
		w.Close() // nothing more reaches the disk
	}
	d.listener = nil
	d.log.Info("ipamd killed", "socket", d.cfg.SocketPath, "lost", d.store.Stats().Assigned)
}

// Instance is the instance the daemon loaded at New.
func (d *Daemon) Instance() cloud.Instance { return d.inst }

// Allocations lists the current allocations, sorted by address.
func (d *Daemon) Allocations() []datastore.Allocation { return d.store.Allocations() }

// Datastore is the daemon's allocator.
func (d *Daemon) Datastore() *datastore.Store { return d.store }

// WarmPool is the warm-pool manager (nil without Cloud).
func (d *Daemon) WarmPool() *warmpool.Manager { return d.pool }

type noENINet struct{}

func (noENINet) Setup(cloud.ENI) error    { return nil }
func (noENINet) Teardown(cloud.ENI) error { return nil }
