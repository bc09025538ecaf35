package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/journal"
)

// containerd 2.4 is not packaged in Debian 12: `make tools` builds it from the
// Go module proxy (containerd, its runc shim and ctr, pinned) into a cache
// dir and names that dir in $CONTAINERD2_DIR. The dir is never put on the
// suite's PATH: containerd finds its shim on PATH, so each containerd is
// started with its own dir first (see pathFirst), and 1.6 never runs 2.4's
// shim nor 2.4 1.6's.

// containerd2Missing says why tools.containerd2 is empty.
var containerd2Missing string

var containerd2Version = regexp.MustCompile(`\s2\.4\.\d+`)

// findContainerd2 returns $CONTAINERD2_DIR if it holds containerd 2.4's
// three binaries, else "" (and why, in containerd2Missing). Only the 2.4
// specs need it: without it the 1.6 specs still run.
func findContainerd2() string {
	dir := os.Getenv("CONTAINERD2_DIR")
	if dir == "" {
		containerd2Missing = "$CONTAINERD2_DIR (not set)"
		return ""
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			containerd2Missing = fmt.Sprintf("%s in $CONTAINERD2_DIR=%s", b, dir)
			return ""
		}
	}
	// The config below is 2.4's (version 4, its plugin ids and fields).
	out, err := exec.Command(filepath.Join(dir, "containerd"), "--version").Output()
	if err != nil || !containerd2Version.Match(out) {
		containerd2Missing = fmt.Sprintf("containerd 2.4 in $CONTAINERD2_DIR=%s (it says %q, %v)", dir, strings.TrimSpace(string(out)), err)
		return ""
	}
	return dir
}

// requireContainerd2 fails a spec that needs containerd 2.4 when
// $CONTAINERD2_DIR does not hold it.
func requireContainerd2() {
	if tools.containerd2 == "" {
		gate("the containerd 2.4 specs need " + containerd2Missing + ": run make tools (it builds containerd v2.4.2 " +
			"from the Go module proxy into $CONTAINERD2_DIR)")
	}
}

// newNode24 is newNode with containerd 2.4 and the conflist at cniVersion
// 1.1.0, vpc-cni journaling every verb.
func newNode24(instanceType string, ipamdArgs ...string) *node {
	requireContainerd2()
	return buildNode(&node{plugin: "vpc-cni", runtime: containerd24}, instanceType, ipamdArgs...)
}

// setV2 makes c containerd 2.4: its binaries, its dir first on PATH.
func (c *cri) setV2() {
	c.v2 = true
	c.bin = filepath.Join(tools.containerd2, "containerd")
	c.ctr = filepath.Join(tools.containerd2, "ctr")
	c.env = pathFirst(os.Environ(), tools.containerd2)
}

// pathFirst is env with dir at the head of PATH.
func pathFirst(env []string, dir string) []string {
	out := []string{"PATH=" + dir}
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			out[0] += ":" + p
			continue
		}
		out = append(out, e)
	}
	return out
}

// configV2 is config's setup for containerd 2.4, in its own config format:
// version 4 (containerd >= 2.3; a version 3 file is migrated at every
// start), where the listeners are server plugins (no [grpc] or [ttrpc])
// and CRI is split into runtime, images and the gRPC service. The same settings as 1.6's, plus what 2.x would
// otherwise do outside the node's dirs: NRI (on by default in 2.x) would
// create /var/run/nri and listen there, so it is off; CDI specs are read
// from an empty dir of the node's, not the machine's /etc/cdi. The shim is
// named by its full path as well as found first on PATH. containerd 2.2+
// reports cgroup v1 (this machine's hierarchy, not the config) as a
// deprecation, which makes ContainerdHasNoDeprecationWarnings false: that
// one is ignored, any other (say, of a setting here) still fails the wait
// for readiness.
func (c *cri) configV2() string {
	rt, img := `'io.containerd.cri.v1.runtime'`, `'io.containerd.cri.v1.images'`
	return fmt.Sprintf(`version = 4
root = %q
state = %q
[plugins.'io.containerd.server.v1.grpc']
  address = %q
[plugins.'io.containerd.server.v1.ttrpc']
  address = %q
[plugins.'io.containerd.internal.v1.opt']
  path = %q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.%s]
  snapshotter = "overlayfs"
  [plugins.%s.pinned_images]
    sandbox = %q
[plugins.%s]
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%q]
  ignore_deprecation_warnings = ["io.containerd.deprecation/cgroup-v1"]
  [plugins.%s.containerd]
    default_runtime_name = "runc"
    [plugins.%s.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %q
      [plugins.%s.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.%s.cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.sock, c.sock+".ttrpc", filepath.Join(c.dir, "opt"),
		img, img, pauseImage, rt, filepath.Join(c.dir, "cdi"), rt, rt, filepath.Join(tools.containerd2, "containerd-shim-runc-v2"),
		rt, rt, c.cniBinDir, c.cniConfDir)
}

// expectOwnBinaries: containerd runs the binary the node chose, and every
// runc shim in its mount namespace is the one beside it (1.6's shim under
// containerd 2.4, or the reverse, would be a test of the wrong pair).
func (c *cri) expectOwnBinaries() {
	exe := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		Expect(err).NotTo(HaveOccurred())
		return r
	}
	self, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.cmd.Process.Pid))
	Expect(err).NotTo(HaveOccurred())
	Expect(self).To(Equal(exe(c.bin)), "containerd's binary")
	var shims []string
	for _, pid := range c.procs() {
		if p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(p) == "containerd-shim-runc-v2" {
			shims = append(shims, p)
		}
	}
	Expect(shims).NotTo(BeEmpty(), "a runc shim runs the sandboxes")
	Expect(shims).To(HaveEach(exe(filepath.Join(filepath.Dir(c.bin), "containerd-shim-runc-v2"))), "the shims' binary")
}

// networkReady is the NetworkReady condition of the CRI Status call; the
// others (RuntimeReady, ContainerdHasNoDeprecationWarnings) must hold.
func (n *node) networkReady() condition {
	conds, err := n.cri.conditions()
	Expect(err).NotTo(HaveOccurred())
	var net []condition
	for _, c := range conds {
		if c.Type == "NetworkReady" {
			net = append(net, c)
		} else {
			Expect(c.Status).To(BeTrue(), "condition %+v", c)
		}
	}
	Expect(net).To(HaveLen(1), "conditions %+v", conds)
	return net[0]
}

var networkIsReady = condition{Type: "NetworkReady", Status: true}

// journalEntries is what vpc-cni journaled for one verb (every verb for
// ""), in order.
func (n *node) journalEntries(verb string) []journal.Entry {
	f, err := os.Open(n.journal)
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	all, err := journal.Read(f)
	Expect(err).NotTo(HaveOccurred())
	var out []journal.Entry
	for _, e := range all {
		if verb == "" || e.Env.Command == verb {
			out = append(out, e)
		}
	}
	return out
}

// cniVersionOf is the cniVersion field of a JSON object.
func cniVersionOf(b []byte) string {
	var v struct{ CNIVersion string }
	Expect(json.Unmarshal(b, &v)).To(Succeed(), "%s", b)
	return v.CNIVersion
}

// cachedResultVersion is the version of the ADD result containerd's libcni
// cached for the sandbox (containerd 1.6 refuses a 1.1.0 one).
func (n *node) cachedResultVersion(s *sandbox) string {
	b, err := os.ReadFile(filepath.Join(n.cri.dir, hiddenDirs[libcniDir], "results", "aws-cni-"+s.id+"-eth0"))
	Expect(err).NotTo(HaveOccurred())
	var c struct{ Result json.RawMessage }
	Expect(json.Unmarshal(b, &c)).To(Succeed())
	return cniVersionOf(c.Result)
}

var _ = Describe("containerd 2.4 drives vpc-cni at CNI 1.1", Label("containerd", "containerd2", "cni-1.1"), func() {
	var t timings
	BeforeEach(func() {
		t = timings{}
		DeferCleanup(func() { t.report() })
	})

	It("runs pods' lifecycle: runp, stopp, rmp, on the primary and a secondary ENI, with a host port", Label("portmap"), func() {
		n := newNode24("t3.medium") // 5 pod addresses on device 0, then device 1
		pods := []*sandbox{n.runp(t, "web-0", portMapping{ContainerPort: 80, HostPort: 8080})}
		for i := 1; i < 6; i++ {
			pods = append(pods, n.runp(t, fmt.Sprintf("web-%d", i)))
		}
		first, last := pods[0], pods[5]
		n.cri.expectOwnBinaries()

		By("ADD ran at 1.1.0 and containerd took its 1.1.0 result")
		adds := n.journalEntries("ADD")
		Expect(adds).To(HaveLen(6))
		for _, e := range adds {
			Expect(e.Error).To(BeNil())
			Expect(cniVersionOf(e.Stdin)).To(Equal("1.1.0"), "the netconf containerd gave vpc-cni")
			Expect(cniVersionOf(e.Result)).To(Equal("1.1.0"), "vpc-cni's result")
		}
		Expect(n.cachedResultVersion(first)).To(Equal("1.1.0"))

		By("device 0: rule 512 only; device 1: rules 512 and 1536 (table 2); portmap's DNAT")
		Expect(netip.MustParsePrefix("10.0.1.0/24").Contains(first.ip)).To(BeTrue(), "first pod %s", first.ip)
		Expect(netip.MustParsePrefix("10.0.2.0/24").Contains(last.ip)).To(BeTrue(), "sixth pod %s", last.ip)
		for _, p := range pods[:5] {
			n.expectUp(p, kernel.TableMain)
		}
		n.expectUp(last, 2)
		nat := n.natRules(false)
		Expect(nat).To(MatchRegexp(`(?m)^-A CNI-DN-\S+ -p tcp .*--dport 8080 -j DNAT --to-destination %s:80$`, first.ip), "nat table:\n%s", nat)

		By("stopp tears the pods down, ipamd releases their addresses, the host port is unmapped")
		for _, p := range []*sandbox{last, first} {
			n.stopp(t, p)
			n.expectGone(p)
			n.expectReleased(p)
		}
		nat = n.natRules(false)
		Expect(nat).NotTo(ContainSubstring("8080"), "nat table:\n%s", nat)
		Expect(nat).NotTo(ContainSubstring(first.ip.String()))

		By("rmp (its DEL with an empty netns), and the neighbours are untouched")
		for _, p := range []*sandbox{last, first} {
			n.rmp(t, p)
			Expect(n.pluginDELs(p)).To(ContainElement(""), "rmp's DEL")
		}
		for _, p := range pods[1:5] {
			n.expectUp(p, kernel.TableMain)
		}
	})

	It("reports the network ready, not ready with vpc-cni's STATUS error once ipamd is evicted, and ready again after it restarts", Label("status"), func() {
		n := newNode24("m5.large")
		// containerd runs STATUS (vpc-cni's, then portmap's) on each CRI
		// Status call (and UpdateRuntimeConfig, which nothing makes here)
		// and on no other: each `crictl info` is one more STATUS in
		// vpc-cni's journal.
		seen := len(n.journalEntries("STATUS"))
		Expect(seen).To(BeNumerically(">", 0), "startContainerd's wait for NetworkReady ran STATUS")
		Expect(n.networkReady()).To(Equal(networkIsReady))
		st := n.journalEntries("STATUS")
		Expect(st).To(HaveLen(seen+1), "one CRI Status call, one STATUS")
		Expect(st[seen].Error).To(BeNil())
		Expect(cniVersionOf(st[seen].Stdin)).To(Equal("1.1.0"))

		By("aws-node is evicted: ipamd is SIGKILLed")
		n.evictIpamd()
		cond := n.networkReady()
		st = n.journalEntries("STATUS")
		Expect(st).To(HaveLen(seen+2), "one CRI Status call, one STATUS")
		e := st[seen+1].Error
		Expect(e).NotTo(BeNil(), "vpc-cni's STATUS failed")
		Expect(e.Code).To(Equal(uint(types.ErrPluginNotAvailable)))
		Expect(e.Msg).To(ContainSubstring("ipamd at unix://" + n.Sock))
		// What kubelet would see (and log as the node's NotReady reason):
		// the plugin's error, verbatim.
		fmt.Fprintf(GinkgoWriter, "NetworkReady false: %s: %s\n", cond.Reason, cond.Message)
		Expect(cond).To(Equal(condition{Type: "NetworkReady", Status: false, Reason: "NetworkPluginNotReady",
			Message: "Network plugin returns error: " + e.Error()}))

		By("aws-node comes back: the network is ready again")
		n.startIpamd(n.instanceType, n.ipamdArgs...)
		Eventually(n.networkReady, 10*time.Second, 50*time.Millisecond).Should(Equal(networkIsReady))
		st = n.journalEntries("STATUS")
		Expect(st[len(st)-1].Error).To(BeNil())
		n.expectUp(n.runp(t, "web-0"), kernel.TableMain)
	})

	It("tears a pod down after aws-node was evicted, leaks nothing, and reuses the address", Label("incident-2048"), func() {
		newNode24("m5.large", "--ip-cooldown", "0s").evictionCycle(t)
	})
})
