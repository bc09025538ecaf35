package unarygrpc

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// backend is a gRPC server's CNIBackend whose answers the tests choose by
// pod name.
type backend struct {
	rpcgrpc.UnimplementedCNIBackendServer
	deadline chan time.Time // the deadline each DelNetwork handler saw
}

func (b *backend) AddNetwork(_ context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", DeviceNumber: 1}},
		NetworkPolicyMode: in.GetK8S_POD_NAME()}, nil
}

func (b *backend) DelNetwork(ctx context.Context, in *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	d, _ := ctx.Deadline()
	b.deadline <- d
	switch in.GetK8S_POD_NAME() {
	case "unknown":
		return nil, status.Error(codes.NotFound, "datastore: unknown pod 50% ünïcode\n")
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	case "big":
		md := make([]*rpc.IPAllocationMetadata, 20000)
		for i := range md {
			md[i] = &rpc.IPAllocationMetadata{IPv4Addr: "10.0.2.11", RouteTableId: int32(i)}
		}
		return &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: md}, nil
	}
	return &rpc.DelNetworkReply{Success: true, PodVlanId: 7}, nil
}

// serve starts a grpc-go server with the backend and the health service
// on a socket in a temp dir.
func serve(t *testing.T) (string, *backend) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ipamd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	b := &backend{deadline: make(chan time.Time, 16)}
	rpcgrpc.RegisterCNIBackendServer(s, b)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock, b
}

// both are the two clients compared: this package's and grpc-go's.
func both(t *testing.T, sock string) map[string]rpc.Invoker {
	t.Helper()
	g, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	u := New("unix", sock)
	t.Cleanup(func() { g.Close(); u.Close() })
	return map[string]rpc.Invoker{"unarygrpc": u, "grpc-go": rpcgrpc.Invoker(g)}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCallsAsGrpcGo: replies, several calls on one connection, a status
// with a message to escape, a method the server does not serve, a reply
// far larger than HTTP/2's initial window, the deadline passed to the
// server: the same as grpc-go's client, call for call.
func TestCallsAsGrpcGo(t *testing.T) {
	sock, b := serve(t)
	for name, cc := range both(t, sock) {
		cni := rpc.NewCNIBackendClient(cc)
		for i := range 3 {
			rep, err := cni.AddNetwork(ctxFor(t, 5*time.Second), &rpc.AddNetworkRequest{K8S_POD_NAME: "p"})
			if err != nil || len(rep.GetIPAllocationMetadata()) != 1 || rep.GetIPAllocationMetadata()[0].GetIPv4Addr() != "10.0.2.11" || rep.GetNetworkPolicyMode() != "p" {
				t.Fatalf("%s: call %d: %v %v", name, i, rep, err)
			}
		}
		rep, err := cni.DelNetwork(ctxFor(t, 5*time.Second), &rpc.DelNetworkRequest{K8S_POD_NAME: "ok"})
		if err != nil || rep.GetPodVlanId() != 7 {
			t.Fatalf("%s: %v %v", name, rep, err)
		}
		if d := <-b.deadline; d.IsZero() || time.Until(d) > 5*time.Second {
			t.Errorf("%s: the server saw deadline %v, want the call's", name, d)
		}
		_, err = cni.DelNetwork(ctxFor(t, 5*time.Second), &rpc.DelNetworkRequest{K8S_POD_NAME: "unknown"})
		<-b.deadline
		if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "datastore: unknown pod 50% ünïcode\n" {
			t.Errorf("%s: %v, want NotFound with the server's message", name, err)
		}
		big, err := cni.DelNetwork(ctxFor(t, 5*time.Second), &rpc.DelNetworkRequest{K8S_POD_NAME: "big"})
		<-b.deadline
		if err != nil || len(big.GetIPAllocationMetadata()) != 20000 {
			t.Errorf("%s: big reply: %d entries, %v", name, len(big.GetIPAllocationMetadata()), err)
		}
		_, err = rpc.NewInventoryClient(cc).PoolStatus(ctxFor(t, 5*time.Second), &rpc.PoolStatusRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: a service the server lacks: %v, want Unimplemented", name, err)
		}
		// rpc's health messages against grpc-go's health server.
		h, err := rpc.NewHealthClient(cc).Check(ctxFor(t, 5*time.Second), &rpc.HealthCheckRequest{})
		if err != nil || h.GetStatus() != rpc.HealthCheckResponse_SERVING {
			t.Errorf("%s: health: %v %v", name, h, err)
		}
	}
}

// TestFailuresAsGrpcGo: the codes the plugin classifies ipamd's failures
// by (plugin.Classify) are grpc-go's: DeadlineExceeded for a handler that
// does not answer in time and for a server that accepted the connection
// and never reads it, Canceled for a cancelled call, Unavailable for a
// socket nobody listens on.
func TestFailuresAsGrpcGo(t *testing.T) {
	sock, b := serve(t)
	for name, cc := range both(t, sock) {
		_, err := rpc.NewCNIBackendClient(cc).DelNetwork(ctxFor(t, 200*time.Millisecond), &rpc.DelNetworkRequest{K8S_POD_NAME: "hang"})
		<-b.deadline
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: a handler past the deadline: %v, want DeadlineExceeded", name, err)
		}
	}
	for name, cc := range both(t, sock) { // a call cut short breaks unarygrpc's connection
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := rpc.NewCNIBackendClient(cc).DelNetwork(ctx, &rpc.DelNetworkRequest{K8S_POD_NAME: "hang"})
		<-b.deadline
		if status.Code(err) != codes.Canceled {
			t.Errorf("%s: a cancelled call: %v, want Canceled", name, err)
		}
	}

	// Accepted, never served (a stopped ipamd's listen backlog).
	mute := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name, cc := range both(t, mute) {
		_, err := rpc.NewCNIBackendClient(cc).DelNetwork(ctxFor(t, 200*time.Millisecond), &rpc.DelNetworkRequest{})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: a server that never answers: %v, want DeadlineExceeded", name, err)
		}
	}

	// A socket file nobody listens on (ipamd gone, its socket left).
	dead := filepath.Join(t.TempDir(), "dead.sock")
	l2, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	l2.Close()
	for name, cc := range both(t, dead) {
		_, err := rpc.NewCNIBackendClient(cc).DelNetwork(ctxFor(t, 2*time.Second), &rpc.DelNetworkRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: nobody listening: %v, want Unavailable", name, err)
		}
	}
}

// TestBrokenConnectionStaysBroken: a server's status does not break the
// connection; a call cut short on it (here, by its deadline, with a
// server that never answers: its stream may be half read) does, and later
// calls fail at once with the same error.
func TestBrokenConnectionStaysBroken(t *testing.T) {
	sock, b := serve(t)
	c := New("unix", sock)
	defer c.Close()
	cni := rpc.NewCNIBackendClient(c)
	if _, err := cni.DelNetwork(ctxFor(t, 5*time.Second), &rpc.DelNetworkRequest{K8S_POD_NAME: "unknown"}); status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	<-b.deadline
	if _, err := cni.DelNetwork(ctxFor(t, 5*time.Second), &rpc.DelNetworkRequest{K8S_POD_NAME: "ok"}); err != nil {
		t.Fatalf("a status broke the connection: %v", err)
	}
	<-b.deadline

	mute := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := New("unix", mute)
	defer m.Close()
	_, err = rpc.NewCNIBackendClient(m).DelNetwork(ctxFor(t, 100*time.Millisecond), &rpc.DelNetworkRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a server that never answers: %v", err)
	}
	start := time.Now()
	_, again := rpc.NewCNIBackendClient(m).AddNetwork(ctxFor(t, 5*time.Second), &rpc.AddNetworkRequest{})
	if again == nil || again.Error() != err.Error() || time.Since(start) > time.Second {
		t.Errorf("after %v: %v, want the same error at once", err, again)
	}
}

// TestRefusesWhatItDoesNotDo: a request larger than a flow-control
// window is refused with a status, nothing sent.
func TestRefusesWhatItDoesNotDo(t *testing.T) {
	c := New("unix", filepath.Join(t.TempDir(), "none.sock"))
	huge := &rpc.DelNetworkRequest{K8S_POD_NAME: strings.Repeat("x", 70000)}
	if err := c.Invoke(context.Background(), "/rpc.CNIBackend/DelNetwork", huge, &rpc.DelNetworkReply{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized request: %v", err)
	}
}
