package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/ipamd"
)

// healthProbe is the grpc-health-probe binary make tools builds at the
// version the Makefile pins ($GRPC_HEALTH_PROBE, which make exports). Its
// absence fails the spec: a probe that did not run must not pass.
func healthProbe() string {
	p := os.Getenv("GRPC_HEALTH_PROBE")
	if p == "" {
		Fail("$GRPC_HEALTH_PROBE is not set: run the suite through make (make integration), after make tools, which builds grpc-health-probe")
	}
	fi, err := os.Stat(p)
	if err != nil {
		Fail("grpc-health-probe ($GRPC_HEALTH_PROBE): " + err.Error() + ": make tools builds it")
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		Fail("grpc-health-probe ($GRPC_HEALTH_PROBE=" + p + ") is not an executable file: make tools builds it")
	}
	return p
}

// probeResult is one run of grpc-health-probe.
type probeResult struct {
	code    int    // exit status
	out     string // what it printed (its log, on stderr)
	elapsed time.Duration
}

// probe runs grpc-health-probe against the node's ipamd socket as the
// reference DaemonSet's readiness and liveness probes do (the kubelet runs
// them in aws-node, in the node's network namespace), with the given
// connect and rpc timeouts and any extra flags. A probe that outlives its
// timeouts by far is killed, and the spec fails.
func (n *node) probe(timeout string, extra ...string) probeResult {
	bin := healthProbe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"-addr=unix://" + n.Sock, "-connect-timeout=" + timeout, "-rpc-timeout=" + timeout}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	Expect(n.NS.Do(cmd.Start)).To(Succeed(), "start %s", bin)
	err := cmd.Wait()
	r := probeResult{elapsed: time.Since(start), out: out.String()}
	Expect(ctx.Err()).NotTo(HaveOccurred(), "grpc-health-probe %s did not exit within 30 s: %s", strings.Join(args, " "), r.out)
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		r.code = exit.ExitCode()
	default:
		Fail("grpc-health-probe " + strings.Join(args, " ") + ": " + err.Error() + ": " + r.out)
	}
	GinkgoWriter.Printf("grpc-health-probe %s: exit %d after %v: %s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.out)
	return r
}

// grpc-health-probe's documented exit statuses.
const (
	probeConnectionFailure = 2
	probeRPCFailure        = 3
)

// stopIpamd is the kubelet's stop of aws-node: SIGTERM, then ipamd exits 0
// and removes its socket.
func (n *node) stopIpamd() {
	Expect(n.ipamd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- n.ipamd.Wait() }()
	select {
	case err := <-done:
		Expect(err).NotTo(HaveOccurred(), "ipamd's exit after SIGTERM")
	case <-time.After(15 * time.Second):
		Fail("ipamd did not exit within 15 s of SIGTERM")
	}
	n.ipamd = nil
	_, err := os.Stat(n.Sock)
	Expect(err).To(MatchError(os.ErrNotExist), "ipamd's socket after a graceful stop")
}

var _ = Describe("grpc-health-probe against ipamd", Label("ipv4", "real-kernel", "ipamd", "probe"), func() {
	It("exits 0 and prints SERVING for a live ipamd, as aws-node's readiness and liveness probes call it", func() {
		n := newNode("t3.medium")

		By("the DaemonSet's probe command: no -service, 5 s timeouts")
		r := n.probe("5s")
		Expect(r.code).To(Equal(0), r.out)
		Expect(r.out).To(ContainSubstring("status: SERVING"))

		By("the reference's service name answers SERVING too")
		r = n.probe("5s", "-service="+ipamd.HealthService)
		Expect(r.code).To(Equal(0), r.out)
		Expect(r.out).To(ContainSubstring("status: SERVING"))

		By("a pod's ADD while probed: the probe does not disturb the CNI service")
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))
		Expect(n.probe("5s").code).To(Equal(0))
		Expect(n.del(p)).To(Succeed())
		Expect(n.allocations()).NotTo(ContainElement(HaveField("IP", ip.String())))
	})

	It("fails, saying it cannot connect, once ipamd is killed (stale socket) or stopped (no socket)", func() {
		n := newNode("t3.medium")
		Expect(n.probe("5s").code).To(Equal(0))

		By("kill -9: the socket file stays behind with nobody listening")
		n.killIpamd()
		_, err := os.Stat(n.Sock)
		Expect(err).NotTo(HaveOccurred(), "a killed ipamd leaves its socket file")
		r := n.probe("5s")
		Expect(r.code).To(Equal(probeConnectionFailure), r.out)
		Expect(r.out).To(ContainSubstring("failed to connect service"))
		Expect(r.out).NotTo(ContainSubstring("SERVING"))

		By("a restarted ipamd is SERVING again")
		n.restartIpamd()
		Expect(n.probe("5s").code).To(Equal(0))

		By("SIGTERM: ipamd stops gracefully and removes its socket")
		n.stopIpamd()
		r = n.probe("5s")
		Expect(r.code).To(Equal(probeConnectionFailure), r.out)
		Expect(r.out).To(ContainSubstring("failed to connect service"))
		Expect(r.out).NotTo(ContainSubstring("SERVING"))
	})

	It("fails within its timeouts against a hung (SIGSTOPped) ipamd, and is SERVING again after SIGCONT", func() {
		n := newNode("t3.medium")
		Expect(n.probe("5s").code).To(Equal(0))

		By("SIGSTOP: the kernel still accepts connections on the socket, but nobody answers")
		pid := n.ipamd.Process.Pid
		// Registered after newNode's kill: runs before it, so a failing
		// spec never leaves a stopped process behind.
		DeferCleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
		Expect(n.ipamd.Process.Signal(syscall.SIGSTOP)).To(Succeed())
		r := n.probe("1s")
		Expect(r.code).To(BeElementOf(probeConnectionFailure, probeRPCFailure), r.out)
		Expect(r.out).To(ContainSubstring("timeout"))
		Expect(r.out).NotTo(ContainSubstring("SERVING"))
		// Not a speed limit: a probe that ignored its timeouts would hang
		// on the stopped ipamd until the 30 s kill, far past this bound.
		Expect(r.elapsed).To(BeNumerically("<", 15*time.Second),
			"the probe's connect (1 s) and rpc (1 s) timeouts must end it, not the 30 s kill")

		By("SIGCONT: the same process answers SERVING again")
		Expect(n.ipamd.Process.Signal(syscall.SIGCONT)).To(Succeed())
		r = n.probe("5s")
		Expect(r.code).To(Equal(0), r.out)
		Expect(r.out).To(ContainSubstring("status: SERVING"))

		By("and stops cleanly on SIGTERM")
		n.stopIpamd()
	})
})
