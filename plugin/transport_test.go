package plugin

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
	"github.com/vpccni/vpccni/plugin/driver"
)

// shortSock is a socket path in a fresh directory short enough for
// sun_path (t.TempDir may not be).
func shortSock(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vpccni")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ipamd.sock")
}

// silentIpamd accepts connections and never writes a byte: the gRPC
// handshake never completes.
func silentIpamd(t *testing.T, sock string) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
}

// stuckBackend takes the call and never answers it, whatever the
// caller's deadline (it waits for the test to end, not for its context).
type stuckBackend struct {
	rpcgrpc.UnimplementedCNIBackendServer
	release chan struct{}
	calls   atomic.Int32
}

func (s *stuckBackend) AddNetwork(context.Context, *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	s.calls.Add(1)
	<-s.release
	return &rpc.AddNetworkReply{}, nil
}

func (s *stuckBackend) DelNetwork(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	s.calls.Add(1)
	<-s.release
	return &rpc.DelNetworkReply{}, nil
}

// stuckIpamd serves a stuckBackend on network/addr and returns it with the
// address it listens on.
func stuckIpamd(t *testing.T, network, addr string) (*stuckBackend, string) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &stuckBackend{release: make(chan struct{})}
	srv := grpc.NewServer()
	rpcgrpc.RegisterCNIBackendServer(srv, b)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	t.Cleanup(func() { close(b.release) }) // runs first: lets handlers return
	return b, l.Addr().String()
}

// TestHungIpamdIsCutOffByIpamdTimeout checks, with the production dialer
// over a real Unix socket, that every call to ipamd ends at ipamdTimeout
// (200ms here) when ipamd hangs, in two ways: a socket that accepts and
// never completes the gRPC handshake, and an ipamd that takes the call and
// never answers it. DEL with a prevResult still tears the pod down and
// succeeds; ADD returns "try again later" (11). Each verb must return
// within the deadline plus a margin, never before the deadline.
func TestHungIpamdIsCutOffByIpamdTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	hangs := []struct {
		name  string
		start func(t *testing.T) (addr string, calls func() int32)
	}{
		{"accepts and never speaks", func(t *testing.T) (string, func() int32) {
			sock := shortSock(t)
			silentIpamd(t, sock)
			return "unix://" + sock, nil
		}},
		{"takes the call and never answers", func(t *testing.T) (string, func() int32) {
			b, sock := stuckIpamd(t, "unix", shortSock(t))
			return "unix://" + sock, b.calls.Load
		}},
	}
	for _, h := range hangs {
		t.Run(h.name+"/DEL", func(t *testing.T) {
			addr, calls := h.start(t)
			r := newRig(t)
			r.p.env.Dial = DialGRPC
			r.expectHandles(true)
			r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil)
			r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil) // ipamd did not take the veth
			begin := time.Now()
			err := r.p.Del(cmdArgs(netconf(t, map[string]any{"ipamdAddress": addr, "ipamdTimeout": timeout.String(),
				"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
			took := time.Since(begin)
			if err != nil {
				t.Fatalf("DEL = %v, want success (torn down from prevResult)", err)
			}
			checkBounded(t, took, timeout)
			if calls != nil && calls() == 0 {
				t.Fatal("the call never reached ipamd; the hang was not the one meant")
			}
		})
		t.Run(h.name+"/ADD", func(t *testing.T) {
			addr, calls := h.start(t)
			r := newRig(t)
			r.p.env.Dial = DialGRPC
			r.expectHandles(true)
			begin := time.Now()
			_, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"ipamdAddress": addr, "ipamdTimeout": timeout.String()})))
			took := time.Since(begin)
			wantCode(t, err, types.ErrTryAgainLater)
			checkBounded(t, took, timeout)
			if calls != nil && calls() == 0 {
				t.Fatal("the call never reached ipamd; the hang was not the one meant")
			}
		})
	}
}

func checkBounded(t *testing.T, took, timeout time.Duration) {
	t.Helper()
	if took < timeout {
		t.Errorf("returned after %v, before the %v deadline: the hang was not waited on", took, timeout)
	}
	if took > timeout+2*time.Second {
		t.Errorf("returned after %v; the %v deadline did not cut the call off", took, timeout)
	}
}

// answeringBackend releases every pod it is asked about.
type answeringBackend struct {
	rpcgrpc.UnimplementedCNIBackendServer
	dels atomic.Int32
}

func (a *answeringBackend) DelNetwork(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	a.dels.Add(1)
	return okDelReply, nil
}

// TestLoopbackTCPAddressIsDialled checks that the TCP form the netconf
// accepts (a loopback IP:port, no scheme) is one the production dialer
// really reaches: DEL without a prevResult asks an ipamd on 127.0.0.1 and
// tears the pod down from its reply.
func TestLoopbackTCPAddressIsDialled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP here: %v", err)
	}
	b := &answeringBackend{}
	srv := grpc.NewServer()
	rpcgrpc.RegisterCNIBackendServer(srv, b)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	r := newRig(t)
	r.p.env.Dial = DialGRPC
	r.expectHandles(true)
	r.drv.EXPECT().Inspect(r.host, r.pod, "eth0").Return(nil, nil)
	r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"ipamdAddress": l.Addr().String(), "ipamdTimeout": "5s"}))); err != nil {
		t.Fatal(err)
	}
	if n := b.dels.Load(); n != 1 {
		t.Fatalf("ipamd on %s got %d DelNetwork calls, want 1", l.Addr(), n)
	}
}
