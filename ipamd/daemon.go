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
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// DefaultSocket is where the reference's ipamd listens since v1.23.
const DefaultSocket = "/var/run/aws-node/ipamd.sock"

// HealthService is the service name the reference marks SERVING, besides
// the empty name its probes check.
const HealthService = "grpc.health.v1.aws-node"

// Config configures a Daemon.
type Config struct {
	SocketPath string
	Inventory  cloud.Inventory
	// Placement, when set, pins a pod to an ENI device. The scenario
	// harness uses it to put pods on the devices a scenario names; the
	// binary leaves it nil.
	Placement func(podNamespace, podName string) (device int, ok bool)
	Logger    *slog.Logger
	// Version is this build's version; ClientVersion is compared with it.
	Version string
	// RejectVersionMismatch makes a ClientVersion other than Version a
	// FailedPrecondition, as the reference does. Off by default: a node
	// that mixes plugin and daemon builds during an upgrade keeps working.
	RejectVersionMismatch bool
}

// Daemon is a running (or stopped) ipamd.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
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
	d := &Daemon{cfg: cfg, log: cfg.Logger, store: datastore.New(inst)}
	st := d.store.Stats()
	d.log.Info("pool loaded", "instance", inst.ID, "type", inst.Type, "enis", st.ENIs, "addresses", st.Total)
	return d, nil
}

// Start listens on the socket and serves in the background. Like the
// reference it creates the socket's directory (0755), removes a stale
// socket a killed ipamd left behind, and restricts the socket to root's
// group (0660) before serving.
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
	d.log.Info("serving", "socket", path)
	return nil
}

// Stop finishes in-flight calls, stops serving and removes the socket.
func (d *Daemon) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener == nil {
		return
	}
	d.health.Shutdown()
	d.server.GracefulStop()
	<-d.done
	os.Remove(d.cfg.SocketPath)
	d.listener = nil
	d.log.Info("stopped")
}

// Kill is what SIGKILL does to the process, as seen from outside: every
// connection drops at once and the socket file stays behind, so a client
// gets "connection refused". The datastore goes with the process (callers
// start a new Daemon to model the restart).
func (d *Daemon) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listener == nil {
		return
	}
	// grpc's Stop would unlink nothing; the unix listener unlinks its
	// file on Close unless told not to.
	if ul, ok := d.listener.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	d.server.Stop()
	<-d.done
	d.listener = nil
	d.log.Info("killed")
}

// Allocations lists the current allocations.
func (d *Daemon) Allocations() []datastore.Allocation { return d.store.Allocations() }

// Datastore is the daemon's allocator.
func (d *Daemon) Datastore() *datastore.Store { return d.store }
