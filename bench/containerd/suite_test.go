// Package cribench measures what containerd's CRI sandbox calls (crictl
// runp, stopp, rmp) cost with vpc-cni (against ipamd --cloud memory) and
// with ptp + host-local, on two nodes built alike (a node network
// namespace each, with its own containerd 1.6 in a private mount
// namespace), the calls interleaved between them. It prints figures and
// fails only when something does not work. The node and containerd
// helpers are copied from e2e/ (a test package cannot be imported).
//
// Run by `make bench` (root; needs containerd, runc and crictl, as the e2e
// suite does, and skips without them unless CI=true).
package cribench

import (
	"github.com/vpccni/vpccni/internal/ociimage"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testns"
)

func TestCRIBench(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "bench: containerd runp/stopp/rmp, vpc-cni beside ptp")
}

const pauseImage = "localhost/vpccni-pause:bench"

var (
	binDir   string
	imageTar string
	tools    struct{ containerd, ctr, crictl, ip string }
)

func gate(reason string) {
	if os.Getenv("CI") == "true" {
		Fail(reason + " (CI=true: this is a failure, not a skip)")
	}
	Skip(reason)
}

func findTools() {
	if err := testns.RequireRoot(); err != nil {
		gate(err.Error())
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
	look("containerd-shim-runc-v2")
	look("runc")
	tools.ctr = look("ctr")
	tools.ip = look("ip")
	look("mount")
	if c := os.Getenv("CRICTL"); c != "" {
		if _, err := os.Stat(c); err != nil {
			missing = append(missing, "crictl ($CRICTL="+c+")")
		}
		tools.crictl = c
	} else {
		tools.crictl = look("crictl")
	}
	if len(missing) > 0 {
		gate("the containerd bench needs " + strings.Join(missing, ", ") +
			" (apt-get install containerd runc; go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0)")
	}
}

var _ = BeforeSuite(func() {
	findTools()
	var err error
	binDir, err = os.MkdirTemp("", "vpccni-bench-bin-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(binDir) })
	for name, pkg := range map[string]string{
		"vpc-cni":  "./plugin/cmd/vpc-cni",
		"ipamd":    "./ipamd/cmd/ipamd",
		"loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
		"pause":    "./e2e/pause",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg)
		cmd.Dir = "../.."
		if name == "pause" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, out)
	}
	// ptp imports modules this go.sum does not list: it is built at
	// go.mod's version with its own module's go.sum.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containernetworking/plugins").Output()
	Expect(err).NotTo(HaveOccurred())
	v := strings.TrimSpace(string(out))
	cmd := exec.Command("go", "install", "github.com/containernetworking/plugins/plugins/main/ptp@"+v,
		"github.com/containernetworking/plugins/plugins/ipam/host-local@"+v)
	cmd.Env = append(os.Environ(), "GOBIN="+binDir)
	b, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go install ptp host-local: %s", b)
	imageTar = filepath.Join(binDir, "pause-image.tar")
	Expect(ociimage.WriteArchive(filepath.Join(binDir, "pause"), pauseImage, imageTar)).To(Succeed())
	fmt.Fprintf(GinkgoWriter, "containernetworking/plugins %s\n", v)
})
