package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/vpccni/vpccni/internal/testsupport/simnode"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ownership"
)

// allocation is one entry of ipamd's /v1/allocations.
type allocation = simnode.Allocation

// reaped waits until ipamd holds nothing a DEL handed over
// (simnode.WaitReaped): a spec's checks after a DEL then see what the DEL
// and ipamd together leave.
func (n *node) reaped() {
	if n.ipamd == nil {
		return
	}
	simnode.WaitReaped(n.IntrospectDialer())
}

// introspect GETs an introspection path over ipamd's Unix socket.
func (n *node) introspect(path string) []byte {
	return simnode.Introspect(n.IntrospectDialer(), path)
}

// allocations GETs /v1/allocations.
func (n *node) allocations() []allocation { return simnode.Allocations(n.IntrospectDialer()) }

// metrics scrapes ipamd's /metrics on the node namespace's loopback: the
// connection is made from inside the namespace.
func (n *node) metrics() string {
	var conn net.Conn
	Expect(n.NS.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", "127.0.0.1:61678", 5*time.Second)
		return err
	})).To(Succeed())
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
	resp, err := c.Get("http://ipamd/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var _ = Describe("ipamd as a daemon", Label("ipv4", "real-kernel", "ipamd"), func() {
	It("keeps its allocations across kill -9 in its checkpoint, and answers the DEL after the restart", func() {
		n := newNode("m5.large")
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))

		By("the allocation is in the checkpoint, mode 0600, and in /v1/allocations")
		fi, err := os.Stat(n.Checkpoint())
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		f, err := checkpoint.Read(n.Checkpoint())
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Allocations).To(HaveLen(1))
		Expect(f.Allocations[0].IPv4).To(Equal(ip.String()))
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: p.containerID, Pod: "default/web-0", IP: ip.String()}))
		m := n.metrics()
		Expect(m).To(ContainSubstring(`vpccni_add_ip_requests_total{result="assigned"} 1`))
		Expect(m).To(ContainSubstring(`awscni_add_ip_req_count 1`))
		Expect(m).To(ContainSubstring(`awscni_aws_api_latency_ms_count{api="DescribeNetworkInterfaces",error="false",status="200"}`), "EC2 calls are measured")
		Expect(m).To(ContainSubstring(`awscni_total_ip_addresses 27`))

		By("the gRPC health service answers SERVING for \"\" and the reference's name")
		conn, err := grpc.NewClient("unix://"+n.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		for _, svc := range []string{"", "grpc.health.v1.aws-node"} {
			h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			Expect(err).NotTo(HaveOccurred())
			Expect(h.Status).To(Equal(healthpb.HealthCheckResponse_SERVING), svc)
		}

		By("kill -9, then a new ipamd process restores the allocation from disk")
		n.killIpamd()
		n.restartIpamd()
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: p.containerID, Pod: "default/web-0", IP: ip.String()}))

		By("DEL: teardown from prevResult, and ipamd releases the address it remembered")
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, ownership.HostVeth("eni", p.ns, p.name))
		Expect(n.allocations()).To(BeEmpty())
		// vpc-cni handed the veth pair over: ipamd deleted it, then
		// released the address.
		Expect(n.metrics()).To(ContainSubstring(`vpccni_del_ip_requests_total{reason="PodDeleted",result="handed-over"} 1`))
	})

	It("refuses a corrupt checkpoint, naming it, and with --recover-from-kernel adopts the live pod's address", func() {
		n := newNode("t3.medium")
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))
		n.killIpamd()
		Expect(os.WriteFile(n.Checkpoint(), []byte(`{"version":"vpc-cni-ipam/1","allocations":[{"ipv4":`), 0o600)).To(Succeed())

		By("without the flag ipamd exits 1 and says what is wrong with which file")
		out, err := n.runIpamdOnce()
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(n.Checkpoint()))
		Expect(out).To(ContainSubstring("--recover-from-kernel"))

		By("with it, the pod's address is adopted and a new pod gets another")
		n.startIpamd("t3.medium", "--recover-from-kernel")
		Expect(n.allocations()).To(ConsistOf(WithTransform(func(a allocation) string { return a.IP }, Equal(ip.String()))))
		q := n.newPod("web-1")
		Expect(podAddr(n.add(q))).NotTo(Equal(ip))
		Expect(n.del(p)).To(Succeed())
		expectGone(n, p, ip, ownership.HostVeth("eni", p.ns, p.name))
		Expect(n.allocations()).To(HaveLen(1))
	})
})

// restartIpamd starts ipamd again with what it was last started with.
func (n *node) restartIpamd() {
	if n.ipamd != nil {
		n.killIpamd()
	}
	n.startIpamd(n.instanceType, n.ipamdArgs...)
}

// runIpamdOnce runs ipamd (with extra flags) expecting it to exit at once,
// and returns what it printed.
func (n *node) runIpamdOnce(extra ...string) (string, error) {
	var out strings.Builder
	cmd := ipamdCmd(n, n.instanceType, extra...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := n.NS.Do(func() error {
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			return fmt.Errorf("ipamd did not exit")
		}
	})
	return out.String(), err
}
