// Package integration runs vpccni on the real kernel: the real vpc-cni and
// ipamd binaries, real gRPC on a real Unix socket, and libcni driving the
// plugin exactly as containerd does — inside network namespaces this suite
// creates and removes. It never touches the machine's own namespace.
package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/machinestate"
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "real kernel: vpc-cni + ipamd in network namespaces")
}

// binDir holds the binaries built for the suite.
var binDir string

// requireRoot: the suite needs root and namespaces. Their absence is a
// failure, never a skip: a suite that did not run must not be counted as
// passing.
func requireRoot() {
	if os.Geteuid() != 0 {
		Fail("the real-kernel suite needs root (network namespaces, veth, rules): run it as root (make test)")
	}
}

// machineState is whether the machine had vpc-cni's default stateDir
// before the suite (process 1): every netconf here names the node's own
// temporary stateDir, and the suite fails if it created the machine's.
var machineState bool

// hostLog watches the machine's /host, where the reference's packages log
// whatever they are told: every reference binary the suite runs runs in
// internal/testsupport/refcni's jail, and the suite fails if /host appeared or, on a
// machine that has one, if the reference's logs in it were written.
var hostLog machinestate.Guard

var _ = SynchronizedBeforeSuite(func() []byte {
	requireRoot()
	machineState = machinestate.Exists()
	hostLog = machinestate.Watch("/host", "a reference binary (aws-cni, ckptgen) ran outside internal/testsupport/refcni's jail",
		"var/log/aws-routed-eni/ipamd.log", "var/log/aws-routed-eni/plugin.log")
	dir, err := os.MkdirTemp("", "vpccni-bin-")
	Expect(err).NotTo(HaveOccurred())
	binaries := map[string]string{
		"./plugin/cmd/vpc-cni":     "vpc-cni",
		"./ipamd/cmd/ipamd":        "ipamd",
		"./node/cmd/vpccni-node":   "vpccni-node",
		"./audit/cmd/vpccni-audit": "vpccni-audit",
		"github.com/containernetworking/plugins/plugins/meta/portmap": "portmap",
	}
	for pkg, name := range binaries {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as shipped
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, out)
	}
	// The failpoints spec crashes the plugin at its kernel steps: only a
	// build with the tag reads VPCCNI_FAILPOINTS. It gets a directory of
	// its own, so no CNI_PATH can mix it up with the production plugin.
	cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", filepath.Join(failpointBinDir(dir), "vpc-cni"), "./plugin/cmd/vpc-cni")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build -tags failpoints: %s", out)
	return []byte(dir)
}, func(dir []byte) {
	requireRoot()
	binDir = string(dir)
})

var _ = SynchronizedAfterSuite(func() {}, func() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	Expect(machinestate.Check(machineState)).To(Succeed())
	Expect(hostLog.Check()).To(Succeed())
})
