package integration

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
	"github.com/vpccni/vpccni/ownership"
)

var _ = Describe("least privilege and bounds", func() {
	It("networks a pod when pluginLogFile is a planted symlink, and never writes through it", func() {
		requireRoot()
		n := newNode("m5.large")
		// The file the symlink aims at stands in for /etc/shadow; it lives
		// in the node's temp dir, never in /etc.
		etc := filepath.Join(n.Dir, "etc")
		Expect(os.Mkdir(etc, 0o755)).To(Succeed())
		target := filepath.Join(etc, "shadow-tmp")
		Expect(os.WriteFile(target, []byte("root:*:19000:0:99999:7:::\n"), 0o640)).To(Succeed())
		old := time.Now().Add(-time.Hour).Truncate(time.Second)
		Expect(os.Chtimes(target, old, old)).To(Succeed())
		os.Remove(n.logFile)
		Expect(os.Symlink(target, n.logFile)).To(Succeed())
		stderr := &testns.SyncBuffer{}
		n.cni = libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(n.Dir, "cache"),
			&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: io.MultiWriter(stderr, GinkgoWriter)}})

		p := n.newPod("web-0")
		res := n.add(p)
		ip := podAddr(res)
		Expect(n.routesFor(ip)).To(HaveLen(1), "the pod's host route")
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, ownership.HostVeth(ownership.DefaultVethPrefix, p.ns, p.name))

		Expect(stderr.String()).To(And(ContainSubstring("pluginLogFile not used"), ContainSubstring("symbolic link")),
			"the plugin says why it logs to stderr")
		b, err := os.ReadFile(target)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal("root:*:19000:0:99999:7:::\n"), "the symlink's target was written")
		fi, err := os.Stat(target)
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.ModTime().Equal(old)).To(BeTrue(), "the symlink's target was modified")
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o640)))
		li, err := os.Lstat(n.logFile)
		Expect(err).NotTo(HaveOccurred())
		Expect(li.Mode() & os.ModeSymlink).NotTo(BeZero())
	})

	It("refuses a 4 MiB request on the real ipamd's socket and goes on serving the plugin", func() {
		requireRoot()
		n := newNode("m5.large")
		conn, err := grpc.NewClient("unix://"+n.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rpcgrpc.NewCNIBackendClient(conn).AddNetwork(ctx, &rpc.AddNetworkRequest{ContainerID: "huge", IfName: "eth0",
			NetworkName: "aws-cni", K8S_POD_NAMESPACE: "default", K8S_POD_NAME: strings.Repeat("a", 4<<20)})
		Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "%v", err)

		p := n.newPod("web-0")
		res := n.add(p)
		Expect(n.routesFor(podAddr(res))).To(HaveLen(1))
		Expect(n.del(p)).To(Succeed())
	})
})
