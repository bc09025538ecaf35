package engine

import (
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// ipamdConns gives the in-process plugin one gRPC connection per ipamd
// incarnation instead of one per invocation. A plugin process dials
// afresh each time; what it can observe of a fresh connection is what it
// observes here: every start, crash, eviction or kill of ipamd drops the
// connection, so no invocation inherits one from an earlier daemon, and a
// connection to a daemon that is down fails every call as a fresh dial
// would (Unavailable). Setting up a connection is about a tenth of an
// explored schedule's work; the plugin's own dialing (a shared
// connection per DEL) is exercised by the real-binary suites.
type ipamdConns struct {
	conn   *grpc.ClientConn
	target string
	of     *ipamd.Daemon // the incarnation conn was made for
	any    bool          // conn exists (of may be nil: ipamd down)
}

// get is the connection to target for the daemon running now.
func (c *ipamdConns) get(target string, now *ipamd.Daemon) (*grpc.ClientConn, error) {
	if c.any && c.of == now && c.target == target {
		return c.conn, nil
	}
	c.close()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conn, c.target, c.of, c.any = conn, target, now, true
	return conn, nil
}

func (c *ipamdConns) close() {
	if c.any {
		c.conn.Close()
		c.conn, c.of, c.any = nil, nil, false
	}
}

// noClose: the connection outlives the invocation (see ipamdConns).
type noClose struct{}

func (noClose) Close() error { return nil }

func (r *run) dialBackend(target string) (rpc.CNIBackendClient, io.Closer, error) {
	conn, err := r.conns.get(target, r.ipamd)
	if err != nil {
		return nil, nil, err
	}
	return rpc.NewCNIBackendClient(conn), noClose{}, nil
}

func (r *run) dialInventory(target string) (rpc.InventoryClient, healthpb.HealthClient, io.Closer, error) {
	conn, err := r.conns.get(target, r.ipamd)
	if err != nil {
		return nil, nil, nil, err
	}
	return rpc.NewInventoryClient(conn), healthpb.NewHealthClient(conn), noClose{}, nil
}
