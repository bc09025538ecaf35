package ipamd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// sockPath is a socket path in a fresh directory. t.TempDir can exceed the
// 108 bytes a Unix socket path may have, so this uses a short one.
func sockPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipamd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "aws-node", "ipamd.sock")
}

func newDaemon(t *testing.T, sock, instanceType string, cfg Config, opts ...Option) *Daemon {
	t.Helper()
	c, err := memory.New(instanceType)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SocketPath, cfg.Inventory = sock, c
	d, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func start(t *testing.T, sock string, cfg Config, opts ...Option) *Daemon {
	t.Helper()
	d := newDaemon(t, sock, "m5.large", cfg, opts...)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func dial(t testing.TB, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func client(t testing.TB, sock string) rpcgrpc.CNIBackendClient {
	return rpcgrpc.NewCNIBackendClient(dial(t, sock))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func addReq(id string) *rpc.AddNetworkRequest {
	return &rpc.AddNetworkRequest{ContainerID: id, IfName: "eth0", NetworkName: "aws-cni", Netns: "/var/run/netns/" + id,
		K8S_POD_NAMESPACE: "default", K8S_POD_NAME: "pod-" + id, ClientVersion: "v-test"}
}

func delReq(id string) *rpc.DelNetworkRequest {
	return &rpc.DelNetworkRequest{ContainerID: id, IfName: "eth0", NetworkName: "aws-cni", Reason: "PodDeleted",
		K8S_POD_NAMESPACE: "default", K8S_POD_NAME: "pod-" + id, ClientVersion: "v-test"}
}

func TestSocket(t *testing.T) {
	sock := sockPath(t) // its directory does not exist yet
	start(t, sock, Config{})
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket: %v, mode %v", err, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(sock)); err != nil || di.Mode().Perm() != 0o755 {
		t.Fatalf("socket directory: %v, mode %v", err, di.Mode())
	}
}

func TestStaleSocketRemoved(t *testing.T) {
	sock := sockPath(t)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	// What a killed ipamd leaves: a socket file nobody listens on.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	start(t, sock, Config{})
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("c1")); err != nil || !r.Success {
		t.Fatalf("over a stale socket: %v %v", r, err)
	}
}

func TestHealth(t *testing.T) {
	sock := sockPath(t)
	d := start(t, sock, Config{})
	h := healthpb.NewHealthClient(dial(t, sock))
	for _, svc := range []string{"", HealthService} {
		r, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
	if _, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
	d.Stop()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Stop: %v", err)
	}
	if _, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("health after Stop: %v", err)
	}
}

func TestAddIdempotentAndPlacement(t *testing.T) {
	sock := sockPath(t)
	start(t, sock, Config{}, WithPlacement(func(ns, name string) (int, bool) { return 1, name == "pod-c1" }))
	c := client(t, sock)
	r1, err := c.AddNetwork(ctx(t), addReq("c1"))
	if err != nil || !r1.Success || len(r1.IPAllocationMetadata) != 1 {
		t.Fatal(r1, err)
	}
	m := r1.IPAllocationMetadata[0]
	if m.IPv4Addr != "10.0.2.11" || m.IPv6Addr != "" || m.DeviceNumber != 1 || m.RouteTableId != 2 {
		t.Fatalf("placed pod got %v", m)
	}
	r2, err := c.AddNetwork(ctx(t), addReq("c1"))
	if err != nil || !r2.Success || r2.IPAllocationMetadata[0].IPv4Addr != m.IPv4Addr {
		t.Fatalf("retried ADD: %v %v", r2, err)
	}
	r3, _ := c.AddNetwork(ctx(t), addReq("c2")) // not placed: lowest device
	if m := r3.GetIPAllocationMetadata()[0]; m.IPv4Addr != "10.0.1.11" || m.DeviceNumber != 0 || m.RouteTableId != 254 {
		t.Fatalf("unplaced pod got %v", m)
	}
}

func TestAddRefused(t *testing.T) {
	sock := sockPath(t)
	d := newDaemon(t, sock, "t3.medium", Config{}) // 15 pod addresses
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := client(t, sock)
	for name, mut := range map[string]func(*rpc.AddNetworkRequest){
		"no ContainerID": func(r *rpc.AddNetworkRequest) { r.ContainerID = "" },
		"no IfName":      func(r *rpc.AddNetworkRequest) { r.IfName = "" },
		"no NetworkName": func(r *rpc.AddNetworkRequest) { r.NetworkName = "" },
		"multi-NIC":      func(r *rpc.AddNetworkRequest) { r.RequiresMultiNICAttachment = true },
	} {
		req := addReq("bad")
		mut(req)
		if r, err := c.AddNetwork(ctx(t), req); err != nil || r.Success || len(r.IPAllocationMetadata) != 0 {
			t.Errorf("%s: %v %v", name, r, err)
		}
	}
	for i := range 15 {
		if r, err := c.AddNetwork(ctx(t), addReq(fmt.Sprint("c", i))); err != nil || !r.Success {
			t.Fatalf("add %d: %v %v", i, r, err)
		}
	}
	// An empty pool is Success=false, not an RPC error (the reference's
	// plugin maps each to a different message).
	if r, err := c.AddNetwork(ctx(t), addReq("c15")); err != nil || r.Success {
		t.Fatalf("empty pool: %v %v", r, err)
	}
	if n := len(d.Allocations()); n != 15 {
		t.Fatalf("%d allocations", n)
	}
}

func TestDel(t *testing.T) {
	sock := sockPath(t)
	d := start(t, sock, Config{})
	c := client(t, sock)
	add, _ := c.AddNetwork(ctx(t), addReq("c1"))
	r, err := c.DelNetwork(ctx(t), delReq("c1"))
	if err != nil || !r.Success || len(r.IPAllocationMetadata) != 1 || !proto.Equal(r.IPAllocationMetadata[0], add.IPAllocationMetadata[0]) {
		t.Fatalf("DEL: %v %v (ADD gave %v)", r, err, add)
	}
	if len(d.Allocations()) != 0 {
		t.Fatal("address still held")
	}
	for _, id := range []string{"c1", "never"} {
		_, err := c.DelNetwork(ctx(t), delReq(id))
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "datastore: unknown pod" {
			t.Fatalf("DEL of %s, not held: %v", id, err)
		}
	}
}

func TestClientVersion(t *testing.T) {
	sock := sockPath(t)
	start(t, sock, Config{Version: "v1"})
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("c1")); err != nil || !r.Success {
		t.Fatalf("another version is accepted by default: %v %v", r, err)
	}
	strict := sockPath(t)
	start(t, strict, Config{Version: "v1", RejectVersionMismatch: true})
	c := client(t, strict)
	_, errAdd := c.AddNetwork(ctx(t), addReq("c1"))
	_, errDel := c.DelNetwork(ctx(t), delReq("c1"))
	for _, err := range []error{errAdd, errDel} {
		if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "wrong client version" {
			t.Fatalf("version mismatch: %v", err)
		}
	}
	same := addReq("c1")
	same.ClientVersion = "v1"
	if r, err := c.AddNetwork(ctx(t), same); err != nil || !r.Success {
		t.Fatalf("same version: %v %v", r, err)
	}
}

// TestKillAndRestartForgets: a killed ipamd leaves its socket behind and
// refuses connections; a new one on the same socket has no memory.
func TestKillAndRestartForgets(t *testing.T) {
	sock := sockPath(t)
	d := start(t, sock, Config{})
	c := client(t, sock)
	if _, err := c.AddNetwork(ctx(t), addReq("c1")); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket gone after Kill: %v", err)
	}
	if conn, err := net.Dial("unix", sock); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("dial after Kill: %v, want connection refused", err)
	}
	if _, err := c.DelNetwork(ctx(t), delReq("c1")); status.Code(err) != codes.Unavailable {
		t.Fatalf("DEL after Kill: %v", err)
	}
	d2 := start(t, sock, Config{})
	if n := len(d2.Allocations()); n != 0 {
		t.Fatalf("restarted ipamd remembers %d allocations", n)
	}
	if _, err := client(t, sock).DelNetwork(ctx(t), delReq("c1")); status.Code(err) != codes.NotFound {
		t.Fatalf("DEL after restart: %v", err)
	}
}

func TestConcurrentAdds(t *testing.T) {
	sock := sockPath(t)
	d := newDaemon(t, sock, "m5.4xlarge", Config{})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := client(t, sock)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := c.AddNetwork(ctx(t), addReq(fmt.Sprint("c", i%50))); err != nil || !r.Success {
				t.Error(r, err)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, a := range d.Allocations() {
		if seen[a.IP.String()] {
			t.Fatalf("%s held twice", a.IP)
		}
		seen[a.IP.String()] = true
	}
	if len(seen) != 50 {
		t.Fatalf("%d allocations for 50 pods", len(seen))
	}
}

// TestLogs: each request is one structured record naming the pod, the
// container, the address, the device and the outcome.
func TestLogs(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	sock := sockPath(t)
	start(t, sock, Config{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil))})
	c := client(t, sock)
	c.AddNetwork(ctx(t), addReq("c1"))
	c.DelNetwork(ctx(t), delReq("c1"))
	c.DelNetwork(ctx(t), delReq("c1"))
	mu.Lock()
	defer mu.Unlock()
	var outcomes []string
	for _, rec := range opRecords(t, buf.Bytes()) {
		line := rec["_line"]
		outcomes = append(outcomes, fmt.Sprint(rec["op"], ":", rec["outcome"]))
		if rec["pod"] != "default/pod-c1" || rec["containerID"] != "c1" || rec["clientVersion"] != "v-test" {
			t.Errorf("record lacks the pod: %s", line)
		}
		if rec["outcome"] != "unknown-pod" && (rec["ip"] != "10.0.1.11" || rec["device"] != 0.0) {
			t.Errorf("record lacks the address: %s", line)
		}
	}
	if want := "[AddNetwork:assigned DelNetwork:released DelNetwork:unknown-pod]"; fmt.Sprint(outcomes) != want {
		t.Errorf("outcomes %v, want %s", outcomes, want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestIPv6Mode: /128s from the primary ENI's prefix, main table, released
// like IPv4.
func TestIPv6Mode(t *testing.T) {
	sock := sockPath(t)
	start(t, sock, Config{IPv6: true})
	c := client(t, sock)
	r, err := c.AddNetwork(ctx(t), addReq("c6"))
	if err != nil || !r.Success || len(r.IPAllocationMetadata) != 1 {
		t.Fatal(r, err)
	}
	m := r.IPAllocationMetadata[0]
	if m.IPv4Addr != "" || m.IPv6Addr == "" || m.DeviceNumber != 0 || m.RouteTableId != 254 {
		t.Fatalf("metadata %v", m)
	}
	d, err := c.DelNetwork(ctx(t), delReq("c6"))
	if err != nil || d.IPAllocationMetadata[0].IPv6Addr != m.IPv6Addr {
		t.Fatal(d, err)
	}
}

// opRecords decodes a JSON log and keeps the records of RPC operations;
// "_line" holds the raw line for messages.
func opRecords(t *testing.T, log []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if rec["op"] != nil {
			rec["_line"] = string(line)
			out = append(out, rec)
		}
	}
	return out
}
