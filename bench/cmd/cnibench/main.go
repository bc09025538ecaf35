// Command cnibench measures CNI ADD and DEL latency of vpc-cni (against a
// running ipamd --cloud memory) beside ptp + host-local, on the real kernel,
// in network namespaces it creates (never the machine's own). Both plugins
// are driven the same way: libcni from Go, from inside a node namespace, with
// a fresh pod namespace per run, interleaved (vpc-cni, ptp, vpc-cni, ptp…).
// It then measures vpc-cni's DEL while ipamd is stopped with SIGSTOP (the
// socket accepts, nothing answers) against the plugin's ipamdTimeout.
//
// It prints figures; it fails only when something does not work (an ADD or
// DEL error, a pod left behind), never on a time. Run as root (make bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vpccni/vpccni/internal/benchstat"
	"github.com/vpccni/vpccni/internal/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

func main() {
	binDir := flag.String("bin", "bin/bench", "directory holding vpc-cni, ipamd, ptp and host-local")
	runs := flag.Int("n", 30, "runs of ADD+DEL per plugin (interleaved)")
	hangRuns := flag.Int("hang-runs", 5, "DELs measured while ipamd is SIGSTOPped")
	timeout := flag.Duration("ipamd-timeout", time.Second, "vpc-cni's ipamdTimeout")
	cooldown := flag.Duration("ip-cooldown", time.Second, "ipamd's --ip-cooldown: a released address rests this long "+
		"(30s by default in ipamd; shorter here so that N runs on an m5.large's 27 addresses do not empty the pool)")
	verbose := flag.Bool("v", false, "plugin stderr and ipamd output to stderr")
	flag.Parse()
	if err := testns.RequireRoot(); err != nil {
		fatal(err)
	}
	abs, err := filepath.Abs(*binDir)
	if err != nil {
		fatal(err)
	}
	for _, b := range []string{"vpc-cni", "ipamd", "ptp", "host-local"} {
		if _, err := os.Stat(filepath.Join(abs, b)); err != nil {
			fatal(fmt.Errorf("%s: %w (make bench builds it)", b, err))
		}
	}
	var out io.Writer = io.Discard
	if *verbose {
		out = os.Stderr
	}
	n, err := newNode(abs, *timeout, *cooldown, out)
	if err != nil {
		fatal(err)
	}
	err = run(n, *runs, *hangRuns, *timeout, *cooldown)
	n.close()
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "cnibench:", err)
	os.Exit(1)
}

// node is the node namespace: stand-in ENIs (veth pairs), ipamd, libcni.
type node struct {
	ns      *testns.NS
	dir     string
	sock    string
	ipamd   *exec.Cmd
	host    kernel.API
	cni     *libcni.CNIConfig
	vpc     *libcni.NetworkConfigList
	ptp     *libcni.NetworkConfigList
	logFile string
}

func newNode(binDir string, timeout, cooldown time.Duration, out io.Writer) (n *node, err error) {
	n = &node{}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if n.ns, err = testns.New("cnibench-node"); err != nil {
		return nil, err
	}
	if n.dir, err = os.MkdirTemp("", "cnibench-"); err != nil {
		return nil, err
	}
	n.sock = filepath.Join(n.dir, "aws-node", "ipamd.sock")
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

	n.cni = libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(n.dir, "cache"),
		&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: out}})
	if n.vpc, err = libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[
		{"type":"vpc-cni","mtu":"9001","ipamdAddress":"unix://%s","ipamdTimeout":"%s","pluginLogFile":"%s","pluginLogLevel":"info","stateDir":%q}]}`,
		n.sock, timeout, n.logFile, filepath.Join(n.dir, "vpc-cni-state")))); err != nil {
		return nil, err
	}
	// ptp + host-local as their README sets them up, without ipMasq (vpc-cni
	// here makes no NAT rule either), its IPAM state in the bench's own dir.
	if n.ptp, err = libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ptpnet","plugins":[
		{"type":"ptp","ipMasq":false,"mtu":9001,"ipam":{"type":"host-local","subnet":"10.99.0.0/16",
		"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"%s"}}]}`, filepath.Join(n.dir, "host-local")))); err != nil {
		return nil, err
	}

	n.ipamd = exec.Command(filepath.Join(binDir, "ipamd"), "--socket", n.sock, "--cloud", "memory",
		"--instance-type", "m5.large", "--checkpoint", filepath.Join(n.dir, "aws-node", "ipam.json"),
		"--introspection-address", "unix:"+filepath.Join(n.dir, "introspect.sock"),
		"--metrics-address", "127.0.0.1:61678", "--ip-cooldown", cooldown.String())
	n.ipamd.Stdout, n.ipamd.Stderr = out, out
	if err = n.ns.Do(n.ipamd.Start); err != nil {
		n.ipamd = nil
		return nil, fmt.Errorf("start ipamd: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, derr := net.Dial("unix", filepath.Join(n.dir, "introspect.sock"))
		if derr == nil {
			c.Close()
			if _, serr := os.Stat(n.sock); serr == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("ipamd did not come up within 15s (run with -v)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n, nil
}

func (n *node) close() {
	if n.ipamd != nil && n.ipamd.Process != nil {
		n.ipamd.Process.Signal(syscall.SIGCONT)
		n.ipamd.Process.Kill()
		n.ipamd.Wait()
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

// pod is one sandbox: its own namespace and the runtime's CNI arguments.
type pod struct {
	ns   *testns.NS
	name string
	rt   *libcni.RuntimeConf
}

func newPod(name string) (*pod, error) {
	ns, err := testns.New("cnibench-pod")
	if err != nil {
		return nil, err
	}
	id := "sandbox-" + name
	return &pod{ns: ns, name: name, rt: &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", id}, {"K8S_POD_UID", "uid-" + name}}}}, nil
}

func (n *node) add(list *libcni.NetworkConfigList, p *pod) (res *current.Result, d time.Duration, err error) {
	err = n.ns.Do(func() error {
		t := time.Now()
		r, err := n.cni.AddNetworkList(context.Background(), list, p.rt)
		d = time.Since(t)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err == nil && len(res.IPs) != 1 {
		err = fmt.Errorf("ADD result has %d addresses, want 1", len(res.IPs))
	}
	return res, d, err
}

func (n *node) del(list *libcni.NetworkConfigList, p *pod) (d time.Duration, err error) {
	err = n.ns.Do(func() error {
		t := time.Now()
		err := n.cni.DelNetworkList(context.Background(), list, p.rt)
		d = time.Since(t)
		return err
	})
	return d, err
}

// gone checks that nothing of the pod is left: its eth0, the host side
// veth (by name for vpc-cni; ptp's is found by the route), the routes and
// rules naming its address.
func (n *node) gone(p *pod, ip net.IP, hostVeth string) error {
	h, err := (linux.Opener{}).Open(p.ns.Path())
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.LinkByName("eth0"); !kernel.IsNotFound(err) {
		return fmt.Errorf("pod %s: eth0 left behind (%v)", p.name, err)
	}
	if hostVeth != "" {
		if _, err := n.host.LinkByName(hostVeth); !kernel.IsNotFound(err) {
			return fmt.Errorf("pod %s: host veth %s left behind (%v)", p.name, hostVeth, err)
		}
	}
	rules, err := n.host.RuleList(kernel.FamilyAll)
	if err != nil {
		return err
	}
	for _, r := range rules {
		for _, sel := range []*net.IPNet{r.Src, r.Dst} {
			if sel != nil && sel.IP.Equal(ip) {
				return fmt.Errorf("pod %s: rule left behind: %+v", p.name, r)
			}
		}
	}
	routes, err := n.host.RouteList(kernel.FamilyAll, kernel.TableUnspec)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.Equal(ip) {
			return fmt.Errorf("pod %s: route left behind: %+v", p.name, r)
		}
	}
	return nil
}

type sample struct{ add, del []time.Duration }

// cycle is one pod's life with one plugin: new namespace, ADD, DEL, check
// that nothing is left, remove the namespace. Only ADD and DEL are timed.
func (n *node) cycle(plugin string, list *libcni.NetworkConfigList, name string, s *sample) error {
	p, err := newPod(name)
	if err != nil {
		return err
	}
	defer p.ns.Close()
	res, da, err := n.add(list, p)
	if err != nil {
		return fmt.Errorf("%s ADD %s: %w (plugin log %s)", plugin, name, err, n.logFile)
	}
	dd, err := n.del(list, p)
	if err != nil {
		return fmt.Errorf("%s DEL %s: %w", plugin, name, err)
	}
	hv := ""
	if plugin == "vpc-cni" {
		hv = ownership.HostVeth("eni", "default", name)
	}
	if err := n.gone(p, res.IPs[0].Address.IP, hv); err != nil {
		return fmt.Errorf("%s: %w", plugin, err)
	}
	s.add, s.del = append(s.add, da), append(s.del, dd)
	return nil
}

func run(n *node, runs, hangRuns int, timeout, cooldown time.Duration) error {
	var vpc, ptp sample
	// One warm-up cycle each (page cache, ipamd's first allocation), not counted.
	var warm sample
	if err := n.cycle("vpc-cni", n.vpc, "warm-vpc", &warm); err != nil {
		return err
	}
	if err := n.cycle("ptp", n.ptp, "warm-ptp", &warm); err != nil {
		return err
	}
	for i := 0; i < runs; i++ {
		if err := n.cycle("vpc-cni", n.vpc, fmt.Sprintf("vpc-%d", i), &vpc); err != nil {
			return err
		}
		if err := n.cycle("ptp", n.ptp, fmt.Sprintf("ptp-%d", i), &ptp); err != nil {
			return err
		}
	}
	fmt.Printf("CNI ADD/DEL through libcni in a node namespace, %d runs each, interleaved (vpc-cni, ptp, ...)\n", runs)
	fmt.Printf("vpc-cni: ipamd --cloud memory (m5.large, --ip-cooldown %s) on a Unix socket; ptp + host-local: containernetworking/plugins from go.mod, ipMasq false\n\n", cooldown)
	benchstat.Header(os.Stdout, "verb")
	benchstat.Compare(os.Stdout, "ADD", vpc.add, ptp.add)
	benchstat.Compare(os.Stdout, "DEL", vpc.del, ptp.del)

	// DEL while ipamd hangs: SIGSTOP keeps its socket accepting (the kernel
	// queues the connection), nothing answers.
	fmt.Printf("\nvpc-cni DEL while ipamd is SIGSTOPped (ipamdTimeout %s), %d runs:\n", timeout, hangRuns)
	var hung []time.Duration
	for i := 0; i < hangRuns; i++ {
		name := fmt.Sprintf("hang-%d", i)
		p, err := newPod(name)
		if err != nil {
			return err
		}
		res, _, err := n.add(n.vpc, p)
		if err != nil {
			p.ns.Close()
			return fmt.Errorf("vpc-cni ADD %s: %w (plugin log %s)", name, err, n.logFile)
		}
		if err := n.ipamd.Process.Signal(syscall.SIGSTOP); err != nil {
			p.ns.Close()
			return err
		}
		d, derr := n.del(n.vpc, p)
		gerr := n.gone(p, res.IPs[0].Address.IP, ownership.HostVeth("eni", "default", name))
		if err := n.ipamd.Process.Signal(syscall.SIGCONT); err != nil {
			p.ns.Close()
			return err
		}
		p.ns.Close()
		if derr != nil {
			return fmt.Errorf("DEL %s with ipamd stopped returned an error: %w", name, derr)
		}
		if gerr != nil {
			return fmt.Errorf("DEL %s with ipamd stopped: %w", name, gerr)
		}
		hung = append(hung, d)
		fmt.Printf("  %s: DEL %s, success, pod torn down (eth0, host veth, route, rules gone)\n", name, benchstat.Ms(d))
	}
	fmt.Printf("  median %s, max %s (deadline %s)\n", benchstat.Ms(benchstat.Median(hung)), benchstat.Ms(benchstat.Max(hung)), timeout)
	return nil
}
