package ipamd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

func start(t *testing.T, sock string, cfg Config) *Daemon {
	t.Helper()
	c, err := memory.New("m5.large")
	if err != nil {
		t.Fatal(err)
	}
	cfg.SocketPath, cfg.Inventory = sock, c
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func dial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

var addReq = &rpc.AddNetworkRequest{ContainerID: "c1", IfName: "eth0", NetworkName: "aws-cni", K8S_POD_NAMESPACE: "default", K8S_POD_NAME: "web-0"}
var delReq = &rpc.DelNetworkRequest{ContainerID: "c1", IfName: "eth0", NetworkName: "aws-cni", Reason: "PodDeleted"}

func TestSocketAndHealth(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "aws-node", "ipamd.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil { // a stale file in the way
		t.Fatal(err)
	}
	start(t, sock, Config{})
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v mode %v", err, fi.Mode())
	}
	if di, _ := os.Stat(filepath.Dir(sock)); di.Mode().Perm() != 0o755 {
		t.Fatalf("dir mode %v", di.Mode())
	}
	h := healthpb.NewHealthClient(dial(t, sock))
	for _, svc := range []string{"", HealthService} {
		r, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
}

func TestAddDel(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ipamd.sock")
	start(t, sock, Config{Placement: func(ns, name string) (int, bool) { return 1, name == "web-0" }})
	c := rpc.NewCNIBackendClient(dial(t, sock))
	r1, err := c.AddNetwork(ctx(t), addReq)
	if err != nil || !r1.Success || len(r1.IPAllocationMetadata) != 1 {
		t.Fatal(r1, err)
	}
	m := r1.IPAllocationMetadata[0]
	if m.IPv4Addr != "10.0.2.11" || m.DeviceNumber != 1 || m.RouteTableId != 2 {
		t.Fatalf("placement ignored: %v", m)
	}
	r2, _ := c.AddNetwork(ctx(t), addReq)
	if r2.IPAllocationMetadata[0].IPv4Addr != m.IPv4Addr {
		t.Fatal("retried ADD got another address")
	}
	bad, err := c.AddNetwork(ctx(t), &rpc.AddNetworkRequest{IfName: "eth0"})
	if err != nil || bad.Success {
		t.Fatalf("empty key: %v %v", bad, err)
	}
	d, err := c.DelNetwork(ctx(t), delReq)
	if err != nil || !d.Success || d.IPAllocationMetadata[0].IPv4Addr != m.IPv4Addr {
		t.Fatal(d, err)
	}
	_, err = c.DelNetwork(ctx(t), delReq)
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "datastore: unknown pod" {
		t.Fatalf("second DEL: %v", err)
	}
}

func TestVersionCheck(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ipamd.sock")
	start(t, sock, Config{Version: "v1", RejectVersionMismatch: true})
	c := rpc.NewCNIBackendClient(dial(t, sock))
	if _, err := c.AddNetwork(ctx(t), addReq); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err = %v", err)
	}
}

// TestKillAndRestartForgets: a killed ipamd leaves its socket behind and
// refuses connections; a new one on the same socket has no memory.
func TestKillAndRestartForgets(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ipamd.sock")
	d := start(t, sock, Config{})
	c := rpc.NewCNIBackendClient(dial(t, sock))
	if _, err := c.AddNetwork(ctx(t), addReq); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket gone after kill: %v", err)
	}
	if _, err := c.DelNetwork(ctx(t), delReq); status.Code(err) != codes.Unavailable {
		t.Fatalf("after kill: %v", err)
	}
	d2 := start(t, sock, Config{})
	if n := len(d2.Allocations()); n != 0 {
		t.Fatalf("restarted ipamd remembers %d allocations", n)
	}
	c2 := rpc.NewCNIBackendClient(dial(t, sock))
	if _, err := c2.DelNetwork(ctx(t), delReq); status.Code(err) != codes.NotFound {
		t.Fatalf("after restart: %v", err)
	}
}
