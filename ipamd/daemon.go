// Package ipamd is the IP address management daemon: it holds the node's
// pool of pod addresses and serves the plugin's AddNetwork and DelNetwork
// calls over gRPC on a root-only Unix socket, with the standard gRPC health
// service beside them. The Daemon runs in-process too (the scenario harness
// starts, kills and restarts it on a real socket).
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// DefaultSocket is where the reference's ipamd listens since v1.23.
const DefaultSocket = "/var/run/aws-node/ipamd.sock"

// HealthService is the service name the reference marks SERVING, besides
// the empty name its probes check.
const HealthService = "grpc.health.v1.aws-node"

// Config configures a Daemon.
type Config struct {
	// SocketPath is the Unix socket to serve on; empty means DefaultSocket.
	SocketPath string
	// Inventory describes the instance and its ENIs (required).
	Inventory cloud.Inventory
	// Placement, when set, pins a pod to an ENI device: the scenario
	// harness uses it to put pods on the devices a scenario names. A full
	// or absent device falls back to the usual choice. The binary leaves
	// it nil.
	Placement func(podNamespace, podName string) (device int, ok bool)
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
}

// Daemon is a running (or stopped) ipamd.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	inst   cloud.Instance // as the inventory described it at New
	store  *datastore.Store
	server *grpc.Server
	health *health.Server

	mu       sync.Mutex
	listener net.Listener
	done     chan struct{}
}

// New loads the instance from the inventory into a fresh datastore.
func New(cfg Config) (*Daemon, error) {
	if cfg.SocketPath == "" {
		cfg.SocketPath = DefaultSocket
	}
	if cfg.Inventory == nil {
		return nil, errors.New("ipamd: no cloud inventory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	inst, err := cfg.Inventory.Instance(context.Background())
	if err != nil {
		return nil, fmt.Errorf("ipamd: describe the instance: %w", err)
	}
	store, err := datastore.New(inst)
	if err != nil {
		return nil, fmt.Errorf("ipamd: instance %s: %w", inst.ID, err)
	}
	return &Daemon{cfg: cfg, log: cfg.Logger, inst: inst, store: store}, nil
}

// Start listens on the socket and serves in the background. Like the
// reference it creates the socket's directory (0755), removes a stale
// socket a killed ipamd left behind, and restricts the socket to root and
// its group (0660) before serving: any local process that can connect can
// take or free pod addresses. A stopped Daemon may be started again; it
// keeps its datastore (a new Daemon is a restarted process).
func (d *Daemon) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener != nil {
		return errors.New("ipamd: already started")
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
	d.server = grpc.NewServer()
	rpc.RegisterCNIBackendServer(d.server, &handler{d: d})
	d.health = health.NewServer()
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	d.health.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(d.server, d.health)
	d.listener = l
	d.done = make(chan struct{})
	go func(s *grpc.Server, done chan struct{}) {
		defer close(done)
		if err := s.Serve(l); err != nil {
			d.log.Error("serve", "error", err)
		}
	}(d.server, d.done)
	st := d.store.Stats()
	// The one startup line: what an operator needs to tell which ipamd
	// this is and what it can hand out.
	trunk, hasTrunk := d.inst.Trunk()
	d.log.Info("ipamd serving", "socket", path, "instance", d.inst.ID, "instanceType", d.inst.Type,
		"enis", st.ENIs, "pool", st.Total, "assigned", st.Assigned, "version", d.cfg.Version,
		"podENI", d.cfg.PodENI != nil, "trunkENI", trunkAttr(trunk, hasTrunk))
	return nil
}

// Stop is a graceful shutdown (SIGTERM): health turns NOT_SERVING, calls
// in flight finish, new ones are refused, and the socket file is removed,
// so a client sees "no such file" rather than a hung socket. The datastore
// stays readable through Allocations and Datastore.
func (d *Daemon) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener == nil {
		return
	}
	d.health.Shutdown()
	d.server.GracefulStop()
	<-d.done
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
// refused". The memory goes with the process: callers model the restart
// with a new Daemon, whose datastore is empty.
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
	d.listener = nil
	d.log.Info("ipamd killed", "socket", d.cfg.SocketPath, "lost", d.store.Stats().Assigned)
}

// Instance is the instance the daemon loaded at New.
func (d *Daemon) Instance() cloud.Instance { return d.inst }

// Allocations lists the current allocations, sorted by address.
func (d *Daemon) Allocations() []datastore.Allocation { return d.store.Allocations() }

// Datastore is the daemon's allocator.
func (d *Daemon) Datastore() *datastore.Store { return d.store }
