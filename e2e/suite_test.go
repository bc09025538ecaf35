// Package e2e has containerd drive the vpc-cni plugin, the way a Kubernetes
// node does: crictl makes CRI sandbox calls (runp, stopp, rmp) to Debian's
// containerd 1.6 (CNI 1.0.0) and to containerd 2.4 (CNI 1.1.0, with
// STATUS), which run the real vpc-cni binary chained with the reference
// portmap plugin, against the real ipamd binary. containerd and
// ipamd run inside a node network namespace the suite creates (with veth
// stand-ins for the ENIs), containerd in a private mount namespace of its
// own; the pods' namespaces are containerd's. Debian's podman 4.3 drives
// vpc-cni the same way, with resultFormat "spec" (podman_test.go). And a
// real single-node Kubernetes cluster (kubernetes_test.go) has kubelet
// drive containerd 2.4, with ipamd and the plugin installed by deploy/'s
// aws-node DaemonSet from vpccni's images, through the #2048 drain. The
// machine's own network namespace is never touched, and everything is
// removed pass or fail.
//
// The suite installs nothing: `make tools` does (containerd, runc,
// iptables, podman from Debian; crictl and containerd 2.4 from the Go
// module proxy, named by $CRICTL and $CONTAINERD2_DIR; the Kubernetes
// binaries and etcd, named by $KUBE_DIR and $ETCD). Without them it fails,
// saying what is missing and what installs it: never a skip, which would
// let a run that tested nothing pass.
package e2e

import (
	"github.com/vpccni/vpccni/internal/testsupport/ociimage"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e: containerd drives vpc-cni")
}

// pauseImage is the sandbox image's name, built and imported by the suite:
// no registry is reachable, so containerd must never try to pull it.
const pauseImage = "localhost/vpccni-pause:e2e"

var (
	// binDir is the CNI bin dir: vpc-cni, loopback (containerd runs it for
	// lo) and portmap, plus ipamd and pause.
	binDir string
	// imageTar is the pause image as an OCI image layout tarball.
	imageTar string
	// tools are the runtime's binaries, found once. containerd2 is the
	// directory of containerd 2.4's containerd, shim and ctr ("" when
	// missing: only its specs need it, see requireContainerd2).
	tools struct{ containerd, ctr, crictl, iptables, ip, nsenter, containerd2 string }
)

// gate fails with the reason: a suite that could not run must not be
// counted as passing.
func gate(reason string) {
	Fail(reason)
}

// findTools looks up what the suite runs. crictl is not packaged in Debian
// 12: `make tools` builds it into a cache dir and names it in $CRICTL
// (without $CRICTL, crictl is looked up on PATH).
func findTools() {
	if err := testns.RequireRoot(); err != nil {
		gate(err.Error() + ": run the e2e suite as root (make test)")
	}
	var missing []string
	look := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	tools.containerd = look("containerd")
	look("containerd-shim-runc-v2") // containerd finds it on PATH
	look("runc")
	tools.ctr = look("ctr")
	tools.iptables = look("iptables")
	tools.ip = look("ip")
	look("mount")
	tools.nsenter = look("nsenter") // kubelet joins containerd's namespaces
	if c := os.Getenv("CRICTL"); c != "" {
		if _, err := os.Stat(c); err != nil {
			missing = append(missing, "crictl ($CRICTL="+c+")")
		}
		tools.crictl = c
	} else {
		tools.crictl = look("crictl")
	}
	tools.containerd2 = findContainerd2()
	findPodman()
	if len(missing) > 0 {
		gate("the containerd e2e suite needs " + strings.Join(missing, ", ") +
			": run make tools (apt-get install containerd runc iptables; crictl is built from the Go module proxy)")
	}
}

var _ = BeforeSuite(func() {
	findTools()
	var err error
	binDir, err = os.MkdirTemp("", "vpccni-e2e-bin-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(binDir) })

	start := time.Now()
	// The reference plugins come from the version go.mod pins (as go.mod
	// tools), so CI builds exactly what the developers ran.
	for name, pkg := range map[string]string{
		"vpc-cni":  "./plugin/cmd/vpc-cni",
		"ipamd":    "./ipamd/cmd/ipamd",
		"loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
		"portmap":  "github.com/containernetworking/plugins/plugins/meta/portmap",
		"pause":    "./e2e/pause",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg)
		cmd.Dir = ".."
		if name == "pause" {
			// It runs alone in an image with no libc.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, out)
	}
	imageTar = filepath.Join(binDir, "pause-image.tar")
	Expect(ociimage.WriteArchive(filepath.Join(binDir, "pause"), pauseImage, imageTar)).To(Succeed())
	fmt.Fprintf(GinkgoWriter, "built the binaries and the pause image in %s\n", time.Since(start).Round(time.Millisecond))
})
