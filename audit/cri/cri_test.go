package cri

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime answers ListPodSandbox with items and remembers what it was
// asked, so a test can see that List sent no filter.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	items []*runtimeapi.PodSandbox

	mu      sync.Mutex
	filters []*runtimeapi.PodSandboxFilter
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	f.filters = append(f.filters, req.GetFilter())
	f.mu.Unlock()
	return &runtimeapi.ListPodSandboxResponse{Items: f.items}, nil
}

// blockingRuntime never answers until the test ends: a hung runtime.
type blockingRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	release chan struct{}
}

func (b *blockingRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	<-b.release
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

// oldRuntime serves runtime.v1 with nothing implemented, as a runtime that
// predates CRI v1 answers.
type oldRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

// serve runs srv on a socket in t.TempDir and returns the socket's path and
// a function giving every method the clients called.
func serve(t *testing.T, srv runtimeapi.RuntimeServiceServer) (string, func() []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var methods []string
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		methods = append(methods, info.FullMethod)
		mu.Unlock()
		return h(ctx, req)
	}))
	runtimeapi.RegisterRuntimeServiceServer(s, srv)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return path, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(methods)
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func sandbox(id, ns, name, uid string, st runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:       id,
		Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns, Name: name, Uid: uid},
		State:    st,
	}
}

func TestListConvertsAndSorts(t *testing.T) {
	f := &fakeRuntime{items: []*runtimeapi.PodSandbox{
		sandbox("c3", "kube-system", "coredns-1", "u3", runtimeapi.PodSandboxState_SANDBOX_READY),
		sandbox("b2", "default", "web", "u2b", runtimeapi.PodSandboxState_SANDBOX_NOTREADY),
		sandbox("a1", "default", "web", "u2a", runtimeapi.PodSandboxState_SANDBOX_READY),
		sandbox("d4", "default", "api", "u4", runtimeapi.PodSandboxState_SANDBOX_READY),
		{Id: "e5", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}, // no metadata
	}}
	path, methods := serve(t, f)
	for _, ep := range []string{"unix://" + path, path} {
		got, err := List(ctx(t, 5*time.Second), ep)
		if err != nil {
			t.Fatalf("%s: %v", ep, err)
		}
		want := []Sandbox{
			{ID: "e5"},
			{ID: "d4", Namespace: "default", Name: "api", UID: "u4", Ready: true},
			{ID: "a1", Namespace: "default", Name: "web", UID: "u2a", Ready: true},
			{ID: "b2", Namespace: "default", Name: "web", UID: "u2b", Ready: false},
			{ID: "c3", Namespace: "kube-system", Name: "coredns-1", UID: "u3", Ready: true},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", ep, got, want)
		}
	}
	// Read-only: the only call is ListPodSandbox, unfiltered, once per List.
	list := "/runtime.v1.RuntimeService/ListPodSandbox"
	if got := methods(); !reflect.DeepEqual(got, []string{list, list}) {
		t.Fatalf("methods called: %v", got)
	}
	if len(f.filters) != 2 || f.filters[0] != nil || f.filters[1] != nil {
		t.Fatalf("filters sent: %v", f.filters)
	}
}

func TestListEmpty(t *testing.T) {
	path, _ := serve(t, &fakeRuntime{})
	got, err := List(ctx(t, 5*time.Second), path)
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want no sandboxes, no error", got, err)
	}
}

func TestListBadEndpoint(t *testing.T) {
	for _, ep := range []string{"", "run/containerd/containerd.sock", "unix://relative.sock", "tcp://127.0.0.1:1234", "unix://"} {
		_, err := List(ctx(t, time.Second), ep)
		if err == nil || !strings.Contains(err.Error(), `CRI endpoint "`+ep+`"`) || !strings.Contains(err.Error(), "absolute") {
			t.Errorf("%q: err = %v", ep, err)
		}
	}
}

func TestListMissingSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	for _, ep := range []string{path, "unix://" + path} {
		_, err := List(ctx(t, time.Second), ep)
		if err == nil || !strings.HasPrefix(err.Error(), "no runtime socket at "+path+": ") || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: err = %v", ep, err)
		}
	}
}

func TestListNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := List(ctx(t, time.Second), path)
	if err == nil || !strings.Contains(err.Error(), path+" is not a socket") {
		t.Fatalf("err = %v", err)
	}
}

func TestListStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// Left behind as a runtime that died leaves it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	_, err = List(ctx(t, 5*time.Second), path)
	if err == nil || !strings.Contains(err.Error(), "nothing listens on runtime socket "+path) {
		t.Fatalf("err = %v", err)
	}
}

func TestListUnimplemented(t *testing.T) {
	path, _ := serve(t, oldRuntime{})
	_, err := List(ctx(t, 5*time.Second), path)
	if err == nil || !strings.Contains(err.Error(), "does not serve CRI v1") {
		t.Fatalf("err = %v", err)
	}
}

func TestListDeadline(t *testing.T) {
	b := &blockingRuntime{release: make(chan struct{})}
	path, _ := serve(t, b)
	t.Cleanup(func() { close(b.release) }) // runs before the server stops
	start := time.Now()
	_, err := List(ctx(t, 200*time.Millisecond), path)
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer ListPodSandbox within") {
		t.Fatalf("err = %v", err)
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("returned after %v, want about 200ms", took)
	}
}
