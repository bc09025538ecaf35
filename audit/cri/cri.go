// Package cri lists a node's pod sandboxes through the Kubernetes Container
// Runtime Interface, read-only.
//
// The node audit has to judge "is this pod live" before it calls anything
// leaked, and --fix removes what it calls leaked. That judgement is only as
// good as its source, so it is taken from the runtime's own list, over the
// socket a real node offers (containerd's, by default), never from what a
// test harness or the checkpoint believes. Only ListPodSandbox is ever
// called: an audit must not change the node it is looking at.
package cri

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultEndpoint is containerd's socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// maxMsgSize is crictl's limit: a node with hundreds of pods answers
// ListPodSandbox with more than gRPC's default 4 MiB.
const maxMsgSize = 16 << 20

// Sandbox is one pod sandbox as the runtime reports it.
type Sandbox struct {
	ID        string // the sandbox ID (the CNI container ID of its network)
	Namespace string // the pod's namespace
	Name      string // the pod's name
	UID       string
	Ready     bool // SANDBOX_READY; false for NOTREADY
}

// List asks the runtime at endpoint for every pod sandbox (ListPodSandbox,
// no filter), read-only.
// endpoint is "unix:///run/containerd/containerd.sock" or a plain absolute
// socket path. List waits as long as ctx allows, so give it a deadline.
func List(ctx context.Context, endpoint string) ([]Sandbox, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	// Checked before dialing because gRPC would only retry a missing socket
	// until the deadline and then report a timeout, hiding the real cause.
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("no runtime socket at %s: %w; start the container runtime or give the endpoint of the one this node runs", path, err)
	case err != nil:
		return nil, fmt.Errorf("cannot look at runtime socket %s: %w", path, err)
	case fi.Mode()&fs.ModeSocket == 0:
		return nil, fmt.Errorf("%s is not a socket (%s): give the container runtime's CRI socket", path, fi.Mode().Type())
	}

	d := &dialer{path: path}
	// The target is a placeholder: the dialer alone decides where to
	// connect, and it keeps the dial error gRPC would flatten into a string.
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(d.dial),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("runtime at %s: %w", path, err)
	}
	defer conn.Close()

	var wait time.Duration
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, callError(path, wait, d.lastErr(), err)
	}

	out := make([]Sandbox, 0, len(resp.GetItems()))
	for _, s := range resp.GetItems() {
		// The getters are nil-safe: a runtime that omits metadata yields
		// empty names rather than a panic mid-audit.
		md := s.GetMetadata()
		out = append(out, Sandbox{
			ID:        s.GetId(),
			Namespace: md.GetNamespace(),
			Name:      md.GetName(),
			UID:       md.GetUid(),
			Ready:     s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		})
	}
	// Runtimes list in no promised order; a stable one keeps audit reports
	// comparable from run to run.
	slices.SortFunc(out, func(a, b Sandbox) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// socketPath accepts the two forms kubelet's --container-runtime-endpoint
// and crictl accept for a local runtime, and nothing else, so a typo is
// reported rather than dialed.
func socketPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		p = rest
	}
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("CRI endpoint %q: want unix:///absolute/path or /absolute/path (e.g. %s)", endpoint, DefaultEndpoint)
	}
	return filepath.Clean(p), nil
}

// dialer remembers its last error: "permission denied" and "connection
// refused" need different remedies, and gRPC reports both as Unavailable.
type dialer struct {
	path string
	mu   sync.Mutex
	err  error
}

func (d *dialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", d.path)
	d.mu.Lock()
	d.err = err
	d.mu.Unlock()
	return c, err
}

func (d *dialer) lastErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// callError says what went wrong in terms of what to do about it.
func callError(path string, wait time.Duration, dialErr, err error) error {
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		within := "before the deadline"
		if wait > 0 {
			within = "within " + wait.Round(time.Millisecond).String()
		}
		return fmt.Errorf("runtime at %s did not answer ListPodSandbox %s: %w; is it hung or overloaded?", path, within, context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("asking runtime at %s: %w", path, context.Canceled)
	case codes.Unimplemented:
		return fmt.Errorf("runtime at %s does not serve CRI v1 (runtime.v1.RuntimeService): %w; it is too old, upgrade to one that serves CRI v1 as kubelet 1.26 and later require", path, err)
	case codes.Unavailable:
		switch {
		case errors.Is(dialErr, fs.ErrPermission):
			return fmt.Errorf("cannot open runtime socket %s: %w; run the audit as root", path, dialErr)
		case errors.Is(dialErr, syscall.ECONNREFUSED):
			return fmt.Errorf("nothing listens on runtime socket %s (stale socket?): %w; is the container runtime running?", path, dialErr)
		case dialErr != nil:
			return fmt.Errorf("cannot reach runtime at %s: %w", path, dialErr)
		}
	}
	return fmt.Errorf("runtime at %s: ListPodSandbox: %w", path, err)
}
