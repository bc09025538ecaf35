// Package simnode builds a simulated EKS node as the integration and e2e
// suites both run one: a network namespace with the ENIs the instance's
// OS leaves (testns.PlugENIs: veth pairs eth0/eth1, their peers beside
// them so they have carrier), its loopback up (ipamd's metrics listen
// there), a directory of its own, and the ipamd binary running inside it
// (--cloud memory) with the node's own socket, checkpoint, introspection
// socket and metrics address, never the machine's defaults.
//
// It is called from Ginkgo specs: a failure fails the spec (Gomega), and
// what it makes is removed when the spec ends (DeferCleanup).
package simnode

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// Node is one simulated node.
type Node struct {
	NS   *testns.NS
	Dir  string     // the node's directory: ipamd's socket and checkpoint under aws-node/
	Sock string     // ipamd's socket
	Host kernel.API // the node namespace
}

// New builds the node: the namespace named nsName, the directory made
// under the machine's temporary directory with dirPrefix (keep both short:
// a socket's path must fit in a sockaddr_un), the node namespace opened,
// lo up, the ENIs plugged. No ipamd yet (StartIpamd).
func New(nsName, dirPrefix string) *Node {
	n := &Node{}
	var err error
	n.NS, err = testns.New(nsName)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { n.NS.Close() })
	n.Dir, err = os.MkdirTemp("", dirPrefix)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(n.Dir) })
	n.Sock = filepath.Join(n.Dir, "aws-node", "ipamd.sock")
	n.Host, err = linux.Opener{}.Open(n.NS.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { n.Host.Close() })
	Expect(n.Host.LinkSetUp("lo")).To(Succeed())
	Expect(testns.PlugENIs(n.Host)).To(Succeed())
	return n
}

// Checkpoint is ipamd's checkpoint file on the node.
func (n *Node) Checkpoint() string { return filepath.Join(n.Dir, "aws-node", "ipam.json") }

// IntrospectSock is ipamd's introspection socket (a Unix socket, reachable
// from the test's namespace).
func (n *Node) IntrospectSock() string { return filepath.Join(n.Dir, "introspect.sock") }

// IpamdArgs is ipamd's command line on the node, extra appended: the
// socket, checkpoint and introspection socket are the node's, the metrics
// on the node namespace's loopback.
func (n *Node) IpamdArgs(instanceType string, extra ...string) []string {
	return append([]string{"--socket", n.Sock, "--cloud", "memory", "--instance-type", instanceType,
		"--checkpoint", n.Checkpoint(), "--introspection-address", "unix:" + n.IntrospectSock(),
		"--metrics-address", "127.0.0.1:61678"}, extra...)
}

// StartIpamd runs cmd (an ipamd with IpamdArgs) inside the node namespace
// (a child inherits the namespace of the locked thread that forks it),
// its output to out, and waits until it serves: its socket, then its
// introspection socket. A killed ipamd leaves its sockets behind: they
// are removed first, so the wait does not mistake them for the new one's.
// When the spec ends, cmd is killed unless it has been waited for.
func (n *Node) StartIpamd(cmd *exec.Cmd, out io.Writer) {
	os.Remove(n.Sock)
	os.Remove(n.IntrospectSock())
	cmd.Stdout, cmd.Stderr = out, out
	Expect(n.NS.Do(cmd.Start)).To(Succeed())
	DeferCleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	Eventually(func() error { _, err := os.Stat(n.Sock); return err }, 10*time.Second, 20*time.Millisecond).Should(Succeed(), "ipamd's socket")
	Eventually(func() error {
		c, err := net.Dial("unix", n.IntrospectSock())
		if err == nil {
			c.Close()
		}
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed(), "ipamd's introspection socket")
}
