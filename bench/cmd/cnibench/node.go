package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/internal/testsupport/refcni"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// timedExec is libcni's plugin executor with a stopwatch: the timed
// region is the plugin process alone, from fork to wait (for ptp, with
// the host-local it runs), and its CPU time is the children's rusage
// across it. Everything else libcni does (the result cache, finding the
// binary) and the bench's set-up stay outside.
type timedExec struct {
	raw       invoke.RawExec
	wall, cpu time.Duration // of the last call
}

func (e *timedExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &before); err != nil {
		return nil, err
	}
	t := time.Now()
	out, err := e.raw.ExecPlugin(ctx, path, stdin, environ)
	e.wall = time.Since(t)
	if gerr := unix.Getrusage(unix.RUSAGE_CHILDREN, &after); gerr != nil {
		return nil, gerr
	}
	e.cpu = cpuTime(after) - cpuTime(before)
	return out, err
}

func cpuTime(r unix.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func (e *timedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *timedExec) Decode(b []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(b)
}

// plugin is one of the three plugins under measure.
type plugin struct {
	name string
	list *libcni.NetworkConfigList
	// hostVeth names the pod's node-side veth (vpc-cni and the reference
	// derive it from the pod), "" for ptp (it picks a random name).
	hostVeth func(podName string) string
	// vethBy is who deletes the pod's veth pair after the plugin's ADD:
	// its DEL (ptp), ipamd once the DEL handed it over (vpc-cni), or the
	// kernel when the runtime removes the pod's namespace (the reference).
	vethBy string
}

// Who deletes a pod's veth pair.
const (
	vethByDEL       = "its DEL"
	vethByIpamd     = "ipamd, after the DEL"
	vethByNamespace = "the namespace's removal"
)

// node is the node namespace: stand-in ENIs (veth pairs), ipamd, libcni
// behind the jail that every plugin call runs in.
type node struct {
	ns      *testns.NS
	dir     string
	sock    string
	ipamd   *exec.Cmd
	host    kernel.API
	jail    *refcni.Jail
	exec    *timedExec
	cni     *libcni.CNIConfig
	logFile string
	setup   setupTimes
}

type nodeConfig struct {
	binDir, refBin string
	instanceType   string
	warmIPs        int
	timeout        time.Duration
	out            io.Writer
}

func newNode(c nodeConfig) (_ *node, err error) {
	n := &node{}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	t := time.Now()
	if n.ns, err = testns.New("cnibench-node"); err != nil {
		return nil, err
	}
	if n.dir, err = os.MkdirTemp("", "cnibench-"); err != nil {
		return nil, err
	}
	// ipamd's socket, checkpoint and release queue live where aws-node
	// keeps them on a node, /var/run/aws-node, which the jail makes a
	// tmpfs as /var/run is on a node (a checkpoint fsync there costs
	// nothing; on the bench's /tmp it would cost every ADD and DEL
	// milliseconds no node pays). ipamd runs in the jail too.
	n.sock = filepath.Join(refcni.SocketDir, "ipamd.sock")
	n.logFile = filepath.Join(n.dir, "plugin.log")
	if n.host, err = (linux.Opener{}).Open(n.ns.Path()); err != nil {
		return nil, err
	}
	if err = n.host.LinkSetUp("lo"); err != nil {
		return nil, err
	}
	if err = testns.PlugENIs(n.host); err != nil {
		return nil, err
	}
	n.setup.node = time.Since(t)

	// The plugins run from the bench's own copy of the bin dir under the
	// node's dir (/tmp, which the jail shows), the reference beside them.
	bin := filepath.Join(n.dir, "bin")
	if err = os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	for _, b := range []string{"vpc-cni", "ipamd", "ptp", "host-local"} {
		if err = copyFile(filepath.Join(c.binDir, b), filepath.Join(bin, b)); err != nil {
			return nil, err
		}
	}
	if err = copyFile(c.refBin, filepath.Join(bin, "aws-cni")); err != nil {
		return nil, err
	}
	n.exec = &timedExec{raw: invoke.RawExec{Stderr: c.out}}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(n.dir, "cache"), n.exec)

	t = time.Now()
	if n.jail, err = refcni.NewJail(""); err != nil {
		return nil, err
	}
	// ipamd touches the kernel only inside a named namespace it can see.
	if err = n.jail.ExposeNetns(n.ns.Path()); err != nil {
		return nil, err
	}
	n.setup.jail = time.Since(t)
	n.ipamd = exec.Command(filepath.Join(bin, "ipamd"), "--socket", n.sock, "--cloud", "memory",
		"--instance-type", c.instanceType, "--warm-ip-target", fmt.Sprint(c.warmIPs),
		"--checkpoint", filepath.Join(refcni.SocketDir, "ipam.json"),
		"--introspection-address", "unix:"+n.introspectSock(),
		"--metrics-address", "127.0.0.1:61678", "--ip-cooldown", "0s")
	n.ipamd.Stdout, n.ipamd.Stderr = c.out, c.out
	if err = n.jail.Do(n.ns.Path(), n.ipamd.Start); err != nil {
		n.ipamd = nil
		return nil, fmt.Errorf("start ipamd: %w", err)
	}
	if err = n.waitPool(c.warmIPs); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *node) introspectSock() string { return filepath.Join(n.dir, "introspect.sock") }

// waitPool waits until ipamd serves and its pool has want free addresses:
// the background pods must never wait for an ENI.
func (n *node) waitPool(want int) error {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", n.introspectSock())
		}}}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if free, err := poolFree(&c); err == nil && free >= want {
			if err := n.jail.Run(func() error { _, err := os.Stat(n.sock); return err }); err == nil {
				return nil
			}
		} else if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d free addresses", free)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("ipamd's pool did not reach %d free addresses within 60s (last: %s; run with -v)", want, last)
}

func poolFree(c *http.Client) (int, error) {
	resp, err := c.Get("http://ipamd/v1/pool")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var pool struct {
		Available *int `json:"available"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pool); err != nil {
		return 0, err
	}
	if pool.Available == nil {
		return 0, fmt.Errorf("/v1/pool has no available count")
	}
	return *pool.Available, nil
}

func (n *node) close() {
	if n.ipamd != nil && n.ipamd.Process != nil {
		n.ipamd.Process.Signal(syscall.SIGCONT)
		n.ipamd.Process.Kill()
		n.ipamd.Wait()
	}
	if n.jail != nil {
		n.jail.Close()
	}
	if n.host != nil {
		n.host.Close()
	}
	if n.ns != nil {
		n.ns.Close()
	}
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// pod is one sandbox: its own namespace and the runtime's CNI arguments.
type pod struct {
	ns   *testns.NS
	name string
	rt   *libcni.RuntimeConf
}

func (n *node) newPod(name string) (*pod, error) {
	ns, err := testns.New("cnibench-pod")
	if err != nil {
		return nil, err
	}
	if err := n.jail.ExposeNetns(ns.Path()); err != nil {
		ns.Close()
		return nil, err
	}
	id := "sandbox-" + name
	return &pod{ns: ns, name: name, rt: &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", id}, {"K8S_POD_UID", "uid-" + name}}}}, nil
}

// removeNetns is the runtime removing the pod's namespace after DEL.
func (n *node) removeNetns(p *pod) error {
	return errors.Join(n.jail.ForgetNetns(p.ns.Path()), p.ns.Close())
}

// call is one timed plugin call: the plugin's wall and CPU time, and the
// whole call through the jail (its overhead is reported as set-up).
type call struct{ wall, cpu, whole time.Duration }

func (n *node) add(pl *plugin, p *pod) (*current.Result, call, error) {
	var res *current.Result
	var c call
	t := time.Now()
	err := n.jail.Do(n.ns.Path(), func() error {
		r, err := n.cni.AddNetworkList(context.Background(), pl.list, p.rt)
		c.wall, c.cpu = n.exec.wall, n.exec.cpu
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	c.whole = time.Since(t)
	if err == nil && len(res.IPs) != 1 {
		err = fmt.Errorf("ADD result has %d addresses, want 1", len(res.IPs))
	}
	return res, c, err
}

func (n *node) del(pl *plugin, p *pod) (call, error) {
	var c call
	t := time.Now()
	err := n.jail.Do(n.ns.Path(), func() error {
		err := n.cni.DelNetworkList(context.Background(), pl.list, p.rt)
		c.wall, c.cpu = n.exec.wall, n.exec.cpu
		return err
	})
	c.whole = time.Since(t)
	return c, err
}
