package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/simnode"
	"github.com/vpccni/vpccni/ipamd/introspect"
	"github.com/vpccni/vpccni/kernel"
)

// node is a simulated EKS node, built as the integration suite builds it:
// a node namespace with veth stand-ins for the ENIs and ipamd running in
// it (--cloud memory). containerd is added by startContainerd.
type node struct {
	*simnode.Node // NS, Dir, Sock, Host: the node namespace, its directory, ipamd's socket, its handle
	ipamd         *exec.Cmd
	ipamdLog      *os.File
	pluginLog     string
	// what startIpamd was last given, for the restart after an eviction
	instanceType string
	ipamdArgs    []string
	cri          *cri
	pm           *podman // the node's podman (runtime podman43): no daemon, run per command
	plugin       string  // containerd's network: "vpc-cni" or "ptp"
	runtime      string  // containerd16, containerd24 or podman43
	// journal is vpc-cni's journalFile ("" for none): the record of every
	// verb, STATUS included (the plugin log has no line for STATUS).
	journal string
	// kubelet: containerd's mount namespace gets kubelet's binds
	// (kubelet_test.go).
	kubelet bool
	// daemonSet: ipamd is not the suite's process but the aws-node
	// DaemonSet's (daemonset_test.go), which installs the plugin and the
	// conflist at the node's fixed paths.
	daemonSet bool
}

// The runtime a node runs: Debian's containerd 1.6 (CNI up to 1.0.0), 2.4
// from $CONTAINERD2_DIR (CNI 1.1.0: it calls STATUS on the CRI Status
// call), or Debian's podman 4.3 (CNI up to 1.0.0; podman_test.go).
const (
	containerd16 = "containerd 1.6"
	containerd24 = "containerd 2.4"
	podman43     = "podman 4.3"
)

// newNode builds the node namespace (ENIs eth0 and eth1: veth pairs, since
// this kernel has no dummy links, with their peers beside them so they
// have carrier), starts ipamd and containerd in it (a podman node has no
// daemon: startPodman prepares it); containerd's network is vpc-cni
// chained with portmap.
func newNode(instanceType string, ipamdArgs ...string) *node {
	return newNodeFor("vpc-cni", instanceType, ipamdArgs...)
}

// newNodeFor is newNode with containerd's network given: "vpc-cni", or
// "ptp" (ptp + host-local, the bench's comparison; ipamd runs all the same
// so both nodes carry the same load).
func newNodeFor(plugin, instanceType string, ipamdArgs ...string) *node {
	return buildNode(&node{plugin: plugin, runtime: containerd16}, instanceType, ipamdArgs...)
}

// buildNode builds the node n describes (its plugin and runtime).
func buildNode(n *node, instanceType string, ipamdArgs ...string) *node {
	// Short: containerd's socket path must fit in a sockaddr_un. ipamd's
	// metrics (and containerd's stream server) listen on the node's own
	// loopback, which simnode brings up.
	n.Node = simnode.New("vpccni-e2e-node", "vpccni-e2e-")
	var err error
	n.pluginLog = filepath.Join(n.Dir, "plugin.log")
	if n.runtime == containerd24 && !n.daemonSet {
		n.journal = filepath.Join(n.Dir, "journal.jsonl")
	}
	n.ipamdLog, err = os.Create(filepath.Join(n.Dir, "ipamd.log"))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(n.ipamdLog.Close)
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			dumpFile("plugin log", n.pluginLog)
			dumpFile("ipamd log", n.ipamdLog.Name())
			if n.journal != "" {
				dumpFile("plugin journal", n.journal)
			}
		}
	})
	if !n.daemonSet {
		n.startIpamd(instanceType, ipamdArgs...)
	}
	if n.runtime != podman43 {
		n.startContainerd()
	}
	return n
}

// startIpamd runs ipamd inside the node namespace, as the integration
// suite does (simnode.StartIpamd: the node's own socket, checkpoint,
// introspection and metrics; killed when the spec ends), its output to
// the node's ipamd log.
func (n *node) startIpamd(instanceType string, extra ...string) {
	n.instanceType, n.ipamdArgs = instanceType, extra
	cmd := exec.Command(filepath.Join(binDir, "ipamd"), n.IpamdArgs(instanceType, extra...)...)
	n.ipamd = cmd
	n.StartIpamd(cmd, n.ipamdLog)
}

// evictIpamd is what the autoscaler's eviction of aws-node does to ipamd.
func (n *node) evictIpamd() {
	Expect(n.ipamd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	n.ipamd.Wait()
	n.ipamd = nil
}

// allocation is one entry of ipamd's /v1/allocations.
type allocation = simnode.Allocation

// reaped waits until ipamd holds nothing a DEL handed over
// (simnode.WaitReaped). Every check of the node's end state waits for it
// first.
func (n *node) reaped() {
	if n.ipamd == nil && !n.daemonSet {
		return
	}
	simnode.WaitReaped(n.introspectDialer())
}

// allocations GETs /v1/allocations from ipamd.
func (n *node) allocations() []allocation { return simnode.Allocations(n.introspectDialer()) }

// introspectDialer reaches ipamd's introspection endpoint: the node's
// socket, or for the DaemonSet's ipamd its default address on the node
// namespace's loopback.
func (n *node) introspectDialer() simnode.Dialer {
	if !n.daemonSet {
		return n.IntrospectDialer()
	}
	return func(ctx context.Context, _, _ string) (c net.Conn, err error) {
		err = n.NS.Do(func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", introspect.DefaultAddress)
			return err
		})
		return c, err
	}
}

// rulesFor lists the node's rules whose selector is exactly the address.
func (n *node) rulesFor(a netip.Addr) []kernel.Rule { return simnode.RulesFor(n.Host, a) }

// routesFor lists the node's routes (any table) to exactly the address.
func (n *node) routesFor(a netip.Addr) []kernel.Route {
	return simnode.RoutesFor(n.Host, a, kernel.TableUnspec)
}

// natRules is `iptables -t nat -S` (or ip6tables) in the node namespace:
// what portmap wrote there.
func (n *node) natRules(v6 bool) string {
	bin := tools.iptables
	if v6 {
		bin = filepath.Join(filepath.Dir(bin), "ip6tables")
	}
	cmd := exec.Command(bin, "-w", "5", "-t", "nat", "-S")
	var out []byte
	Expect(n.NS.Do(func() (err error) { out, err = cmd.CombinedOutput(); return err })).To(Succeed(), "%s", out)
	return string(out)
}

// dumpFile copies a log into the spec's output when it failed.
func dumpFile(what, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	const max = 20000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	fmt.Fprintf(GinkgoWriter, "---- %s (%s), last %d bytes ----\n%s\n", what, path, len(b), b)
}
