package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

const staticFile = `{"default/sg": {"eniId": "eni-0a1b2c3d4e5f60718", "ifAddress": "0a:1b:2c:3d:4e:5f",
	"privateIp": "192.168.5.20", "vlanID": 7, "subnetCidr": "192.168.5.0/24"}}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPodENIUsageErrors: flags that cannot mean what they say exit 2.
func TestPodENIUsageErrors(t *testing.T) {
	t.Setenv("ENABLE_POD_ENI", "")
	file := writeFile(t, "pods.json", staticFile)
	for args, want := range map[string]string{
		"--pod-eni-source static":                  "--pod-eni-source needs --enable-pod-eni",
		"--pod-eni-file " + file:                   "--pod-eni-file needs --enable-pod-eni",
		"--kubeconfig /x":                          "--kubeconfig needs --enable-pod-eni",
		"--enable-pod-eni --pod-eni-source etcd":   `--pod-eni-source "etcd": want kubernetes or static`,
		"--enable-pod-eni --pod-eni-source static": "static needs --pod-eni-file PATH",
		"--enable-pod-eni --pod-eni-file " + file:  "--pod-eni-file is for --pod-eni-source static",
		"--enable-pod-eni --pod-eni-source static --pod-eni-file x --kubeconfig /x": "--kubeconfig is for --pod-eni-source kubernetes",
		"--enable-pod-eni=maybe": "invalid boolean value",
	} {
		var errb bytes.Buffer
		code := run(isolated(t, append(strings.Fields(args), "--socket", filepath.Join(t.TempDir(), "s"))...), &bytes.Buffer{}, &errb, stopped())
		if code != exitUsage || !strings.HasPrefix(errb.String(), "ipamd: ") || !strings.Contains(errb.String(), want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", args, code, errb.String(), want)
		}
	}
}

// TestPodENISourceFailures: a source that cannot be built stops ipamd
// with exit 1 and says why.
func TestPodENISourceFailures(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	bad := writeFile(t, "bad.json", `{"default/sg": {"ifAddress": "0a:1b:2c:3d:4e:5f", "privateIp": "192.168.5.20", "vlanID": 4095}}`)
	for args, want := range map[string]string{
		"--enable-pod-eni": "not running in a cluster",
		"--enable-pod-eni --kubeconfig /nonexistent/kubecfg":                             "--kubeconfig /nonexistent/kubecfg",
		"--enable-pod-eni --pod-eni-source static --pod-eni-file /nonexistent/pods.json": "no such file",
		"--enable-pod-eni --pod-eni-source static --pod-eni-file " + bad:                 "vlanID 4095 outside 1..4094",
	} {
		var errb bytes.Buffer
		code := run(isolated(t, append(strings.Fields(args), "--socket", filepath.Join(t.TempDir(), "s"))...), &bytes.Buffer{}, &errb, stopped())
		if code != exitFailed || !strings.Contains(errb.String(), "ipamd cannot start") || !strings.Contains(errb.String(), want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", args, code, errb.String(), want)
		}
	}
}

// syncBuffer is a bytes.Buffer the daemon's goroutines may write while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs the command in-process until the test ends and returns a
// client on its socket.
func serve(t *testing.T, args ...string) (rpcgrpc.CNIBackendClient, *syncBuffer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipamd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ipamd.sock")
	stop := make(chan os.Signal, 1)
	done := make(chan int)
	logs := &syncBuffer{}
	go func() {
		done <- run(isolated(t, append(args, "--socket", sock, "--log-format", "json")...), &bytes.Buffer{}, logs, stop)
	}()
	t.Cleanup(func() {
		stop <- syscall.SIGTERM
		if code := <-done; code != exitOK {
			t.Errorf("exit %d: %s", code, logs.String())
		}
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket: %s", logs.String())
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The socket file appears before ipamd serves on it: wait for its
	// health service to answer, so a test never races the start-up.
	hc := healthpb.NewHealthClient(conn)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ipamd does not serve: %v: %s", err, logs.String())
		}
	}
	return rpcgrpc.NewCNIBackendClient(conn), logs
}

func add(pod string) *rpc.AddNetworkRequest {
	return &rpc.AddNetworkRequest{ContainerID: "c-" + pod, IfName: "eth0", NetworkName: "aws-cni",
		K8S_POD_NAMESPACE: "default", K8S_POD_NAME: pod, ClientVersion: buildVersion}
}

// TestPodENIStaticMemory: --cloud memory with a static source. The trunk
// ENI takes device 2 (the pool shrinks to 18), a regular pod is served as
// before, and a branch pod is refused because no link in this namespace
// has the memory trunk's MAC, which the log says; its DEL needs no trunk.
func TestPodENIStaticMemory(t *testing.T) {
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if i.HardwareAddr.String() == "02:00:00:00:02:01" {
				t.Skipf("%s has the memory trunk's MAC: this namespace is a harness's", i.Name)
			}
		}
	}
	file := writeFile(t, "pods.json", staticFile)
	c, logs := serve(t, "--enable-pod-eni", "--pod-eni-source", "static", "--pod-eni-file", file)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := c.AddNetwork(ctx, add("web")); err != nil || !r.Success || r.PodVlanId != 0 {
		t.Fatalf("regular pod: %v %v", r, err)
	}
	if r, err := c.AddNetwork(ctx, add("sg")); err != nil || r.Success {
		t.Fatalf("branch pod with no trunk link: %v %v", r, err)
	}
	r, err := c.DelNetwork(ctx, &rpc.DelNetworkRequest{ContainerID: "c-sg", IfName: "eth0", NetworkName: "aws-cni",
		K8S_POD_NAMESPACE: "default", K8S_POD_NAME: "sg", ClientVersion: buildVersion})
	if err != nil || !r.Success || r.PodVlanId != 7 || r.IPAllocationMetadata[0].IPv4Addr != "192.168.5.20" {
		t.Fatalf("branch pod DEL: %v %v", r, err)
	}
	out := logs.String()
	for _, want := range []string{`"pool":18`, `"podENI":true`, `02:00:00:00:02:01, device 2`,
		`"outcome":"no-trunk"`, "no link with the trunk ENI's MAC 02:00:00:00:02:01", "--cloud memory", `"vlan":7`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// TestPodENIKubeconfig: with --kubeconfig the kubernetes source starts
// without contacting the API server; a lookup it cannot make refuses the
// pod's ADD (Success=false) rather than failing the daemon.
func TestPodENIKubeconfig(t *testing.T) {
	// Port 1 on loopback: nothing listens, the GET is refused at once.
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
	c, logs := serve(t, "--enable-pod-eni", "--kubeconfig", kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := c.AddNetwork(ctx, add("web")); err != nil || r.Success {
		t.Fatalf("ADD with the API server down: %v %v", r, err)
	}
	if out := logs.String(); !strings.Contains(out, `"outcome":"pod-eni-lookup-failed"`) || !strings.Contains(out, "default/web") {
		t.Errorf("logs: %s", out)
	}
}
