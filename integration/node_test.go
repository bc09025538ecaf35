package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/simnode"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
)

// node is a simulated EKS node: a node namespace with stand-in ENIs, an
// ipamd process in it (simnode builds both, as for the e2e suite), and
// libcni configured like containerd's.
type node struct {
	*simnode.Node // NS, Dir, Sock, Host: the node namespace, its directory, ipamd's socket, its handle
	ipamd         *exec.Cmd
	cni           *libcni.CNIConfig
	list          *libcni.NetworkConfigList
	logFile       string
	// stateDir is the plugin's (its attachment records): never the
	// machine's /var/lib/cni/vpc-cni.
	stateDir string
	// what startIpamd was last given, for restarts
	instanceType string
	ipamdArgs    []string
	// ipamdOut, when set, gets a copy of what ipamd prints (its log).
	ipamdOut io.Writer
	// ipamdBin, when set, is the ipamd binary startIpamd runs (a
	// legacydelete build); the suite's own otherwise.
	ipamdBin string
}

// newNode builds the node namespace. ENIs are veth pairs (this kernel has
// no dummy links): eth0/eth1 with their peers beside them so they have
// carrier.
func newNode(instanceType string, ipamdArgs ...string) *node {
	return newNodeWith(instanceType, nil, ipamdArgs...)
}

// newNodeWith lets a case add links to the node before ipamd starts.
func newNodeWith(instanceType string, extra func(kernel.API), ipamdArgs ...string) *node {
	n := newNodeWithoutIpamd()
	if extra != nil {
		extra(n.Host)
	}
	n.startIpamd(instanceType, ipamdArgs...)
	return n
}

// newNodeWithoutIpamd is newNode up to ipamd's start: the node namespace
// with the ENIs the OS leaves (eth0, eth1) and libcni configured as
// containerd's, so that a case can start ipamd its own way.
func newNodeWithoutIpamd() *node {
	sim := simnode.New("vpccni-node", "vpccni-node-")
	n := &node{Node: sim}
	n.logFile = filepath.Join(n.Dir, "plugin.log")
	n.stateDir = filepath.Join(n.Dir, "state")
	var err error
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(n.Dir, "cache"), &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: GinkgoWriter}})
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[{"type":"vpc-cni","mtu":"9001",
		"ipamdAddress":"unix://%s","ipamdTimeout":"2s","pluginLogFile":"%s","pluginLogLevel":"debug","stateDir":"%s"}]}`, n.Sock, n.logFile, n.stateDir)
	n.list, err = netConfList(conf)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// plugENIs gives a node namespace the ENIs the OS leaves (testns.PlugENIs).
func plugENIs(h kernel.API) { Expect(testns.PlugENIs(h)).To(Succeed()) }

// ifAddr is an interface address: the address with its prefix's length.
func ifAddr(s string) *net.IPNet { return testns.IfAddr(s) }

func netConfList(conf string) (*libcni.NetworkConfigList, error) {
	return libcni.NetworkConfFromBytes([]byte(conf))
}

// ipamdCmd is the ipamd command line of the node (simnode's), run by the
// suite's ipamd binary or n.ipamdBin.
func ipamdCmd(n *node, instanceType string, extra ...string) *exec.Cmd {
	args := n.IpamdArgs(instanceType, extra...)
	bin := n.ipamdBin
	if bin == "" {
		bin = filepath.Join(binDir, "ipamd")
	}
	return exec.Command(bin, args...)
}

// startIpamd runs ipamd inside the node namespace (simnode.StartIpamd:
// stale sockets removed, killed when the spec ends) and waits until it
// serves, on a socket only root and its group reach.
func (n *node) startIpamd(instanceType string, extra ...string) {
	n.instanceType, n.ipamdArgs = instanceType, extra
	cmd := ipamdCmd(n, instanceType, extra...)
	var out io.Writer = GinkgoWriter
	if n.ipamdOut != nil {
		out = io.MultiWriter(GinkgoWriter, n.ipamdOut)
	}
	n.ipamd = cmd
	n.StartIpamd(cmd, out)
	fi, err := os.Stat(n.Sock)
	Expect(err).NotTo(HaveOccurred())
	Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o660)), "ipamd socket mode")
}

// killIpamd is what the autoscaler's eviction does to aws-node.
func (n *node) killIpamd() {
	Expect(n.ipamd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	n.ipamd.Wait()
	n.ipamd = nil
}

// pod is a sandbox with its own namespace.
type pod struct {
	ns, name, containerID string
	netns                 *testns.NS
	rt                    *libcni.RuntimeConf
}

func (n *node) newPod(name string) *pod {
	p := &pod{ns: "default", name: name, containerID: "sandbox-" + name}
	var err error
	p.netns, err = testns.New("vpccni-pod")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { p.netns.Close() })
	p.rt = &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns.Path(), IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", p.name},
		{"K8S_POD_INFRA_CONTAINER_ID", p.containerID}, {"K8S_POD_UID", "uid-" + name}}}
	return p
}

// add runs CNI ADD through libcni from inside the node namespace, as
// containerd on the node would.
func (n *node) add(p *pod) *current.Result {
	var res *current.Result
	Expect(n.NS.Do(func() error {
		r, err := n.cni.AddNetworkList(context.Background(), n.list, p.rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})).To(Succeed(), "ADD %s (plugin log %s)", p.name, n.logFile)
	return res
}

// check runs CNI CHECK through libcni (with the cached result).
func (n *node) check(p *pod) error {
	return n.NS.Do(func() error { return n.cni.CheckNetworkList(context.Background(), n.list, p.rt) })
}

// del runs CNI DEL through libcni: libcni hands the cached ADD result to
// the plugin as prevResult.
// A DEL (one that fails too: it may have handed the veth over before it
// reported a bad prevResult) is followed by ipamd's reaping of the veth
// pair it was handed (reaped), so a spec sees the end state.
func (n *node) del(p *pod) error {
	err := n.NS.Do(func() error { return n.cni.DelNetworkList(context.Background(), n.list, p.rt) })
	n.reaped()
	return err
}

func podAddr(res *current.Result) netip.Addr {
	Expect(res.IPs).To(HaveLen(1))
	a, ok := netip.AddrFromSlice(res.IPs[0].Address.IP)
	Expect(ok).To(BeTrue())
	return a.Unmap()
}

// rulesFor lists the node's rules whose selector is exactly the address.
func (n *node) rulesFor(a netip.Addr) []kernel.Rule { return simnode.RulesFor(n.Host, a) }

// routesFor lists the node's main-table routes to exactly the address.
func (n *node) routesFor(a netip.Addr) []kernel.Route {
	return simnode.RoutesFor(n.Host, a, kernel.TableMain)
}
