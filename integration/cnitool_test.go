package integration

import (
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/ownership"
)

var (
	cnitoolOnce sync.Once
	cnitoolBin  string
	cnitoolErr  error
)

// buildCnitool builds upstream's cnitool, a go.mod tool, so at the
// containernetworking/cni version go.mod pins; once per process and only
// when a cnitool spec runs.
func buildCnitool() string {
	cnitoolOnce.Do(func() {
		dir := filepath.Join(binDir, fmt.Sprintf("cnitool-%d", GinkgoParallelProcess()))
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "cnitool"), "github.com/containernetworking/cni/cnitool")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			cnitoolErr = fmt.Errorf("go build cnitool: %v: %s", err, out)
			return
		}
		cnitoolBin = filepath.Join(dir, "cnitool")
	})
	Expect(cnitoolErr).NotTo(HaveOccurred())
	return cnitoolBin
}

// conf11 is the node's network at CNI 1.1.0 (GC and STATUS) under a name
// (list11, and cnitool's conflists).
func (n *node) conf11(name string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"vpc-cni","mtu":"9001",
		"ipamdAddress":"unix://%s","ipamdTimeout":"2s","pluginLogFile":"%s","pluginLogLevel":"debug","stateDir":"%s"}]}`, name, n.Sock, n.logFile, n.stateDir)
}

// cnitool runs the real cnitool binary in the node's network namespace, as
// an operator on the node would.
type cnitool struct {
	n      *node
	bin    string
	ip     string
	netDir string // NETCONFPATH
	// cache is bind-mounted over libcni.CacheDir in cnitool's own mount
	// namespace: cnitool has no setting for the cache directory.
	cache string
	// tap is the CNI_PATH: a vpc-cni that runs the real one and keeps a
	// copy of each reply in replies. cnitool prints only an error's msg and
	// details, never its code, and exits 1 for every failure; the code the
	// runtime received is in the plugin's reply.
	tap, replies string
}

// newCnitool writes one conflist per network name, and checks when the
// spec ends that cnitool wrote nothing to the machine's libcni cache.
func (n *node) newCnitool(networks ...string) *cnitool {
	ip, err := exec.LookPath("ip")
	Expect(err).NotTo(HaveOccurred(), "cnitool runs through `ip netns exec` (iproute2)")
	c := &cnitool{n: n, bin: buildCnitool(), ip: ip}
	for d, p := range map[string]*string{"net.d": &c.netDir, "cnitool-cache": &c.cache, "tap": &c.tap, "replies": &c.replies} {
		*p = filepath.Join(n.Dir, d)
		Expect(os.MkdirAll(*p, 0o755)).To(Succeed())
	}
	for i, name := range networks {
		f := filepath.Join(c.netDir, fmt.Sprintf("%02d-%s.conflist", 10+i, name))
		Expect(os.WriteFile(f, []byte(n.conf11(name)), 0o644)).To(Succeed())
	}
	// $CNI_COMMAND and $CNI_CONTAINERID name the reply; $$ keeps the
	// replies of one cnitool run apart. The paths are the test's temporary
	// directories: nothing in them the shell would expand.
	shim := fmt.Sprintf("#!/bin/sh\nreply=%q/\"$CNI_COMMAND-$CNI_CONTAINERID-$$\"\n%q >\"$reply\"\nrc=$?\ncat \"$reply\"\nexit $rc\n",
		c.replies, filepath.Join(binDir, "vpc-cni"))
	Expect(os.WriteFile(filepath.Join(c.tap, "vpc-cni"), []byte(shim), 0o755)).To(Succeed())

	// The bind needs a mount point. When the machine has none, an empty
	// one is made and removed afterwards, only if still empty (as the e2e
	// suite does for containerd).
	if _, err := os.Stat(libcni.CacheDir); errors.Is(err, fs.ErrNotExist) {
		Expect(os.MkdirAll(libcni.CacheDir, 0o755)).To(Succeed())
		// Not an error when it fails: whatever was written there, the
		// check below says so.
		DeferCleanup(func() { os.Remove(libcni.CacheDir) })
	}
	before := treeSnapshot(libcni.CacheDir)
	DeferCleanup(func() {
		Expect(treeSnapshot(libcni.CacheDir)).To(Equal(before), "the machine's %s after cnitool", libcni.CacheDir)
	})
	return c
}

// treeSnapshot lists a directory tree: path, mode, size and mtime of each entry.
func treeSnapshot(dir string) map[string]string {
	out := map[string]string{}
	Expect(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%v %d %v", fi.Mode(), fi.Size(), fi.ModTime())
		return nil
	})).To(Succeed())
	return out
}

// cnitoolRun is what one cnitool command did.
type cnitoolRun struct {
	stdout, stderr string
	exit           int
	replies        map[string][]byte // the plugin's replies, by CNI_COMMAND-CNI_CONTAINERID
}

// run runs `cnitool VERB NETWORK NETNS` in the node's namespace. `ip netns
// exec` gives it a private mount namespace (mounts made there do not
// propagate back); the bind over libcni's cache is made in it, so only
// cnitool and the plugins it runs see the test's directory there.
func (c *cnitool) run(cniArgs, verb, network, netns string) cnitoolRun {
	entries, err := os.ReadDir(c.replies)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		Expect(os.Remove(filepath.Join(c.replies, e.Name()))).To(Succeed())
	}
	cmd := exec.Command(c.ip, "netns", "exec", c.n.NS.Name(), "sh", "-ec", `mount --bind "$1" "$2"; shift 2; exec "$@"`,
		"sh", c.cache, libcni.CacheDir, c.bin, verb, network, netns)
	// Only what cnitool reads: nothing of the test's environment (a
	// CNI_IFNAME, say) leaks into the run.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CNI_PATH=" + c.tap, "NETCONFPATH=" + c.netDir}
	if cniArgs != "" {
		cmd.Env = append(cmd.Env, "CNI_ARGS="+cniArgs)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := cnitoolRun{stdout: stdout.String(), stderr: stderr.String(), replies: map[string][]byte{}}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.exit = ee.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred(), "ip netns exec … cnitool %s", verb)
	}
	GinkgoWriter.Printf("cnitool %s %s: exit %d\nstdout: %s\nstderr: %s\n", verb, network, r.exit, r.stdout, r.stderr)
	entries, err = os.ReadDir(c.replies)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.replies, e.Name()))
		Expect(err).NotTo(HaveOccurred())
		name := e.Name()[:strings.LastIndex(e.Name(), "-")]
		r.replies[name] = b
	}
	return r
}

// ok: cnitool succeeded.
func (r cnitoolRun) ok() {
	GinkgoHelper()
	Expect(r.exit).To(Equal(0), "cnitool: %s", r.stderr)
}

// failed: cnitool failed, and the plugin's one reply (to CNI_COMMAND verb)
// was a CNI error, returned.
func (r cnitoolRun) failed(verb string) *types.Error {
	GinkgoHelper()
	Expect(r.exit).NotTo(Equal(0), "cnitool succeeded: %s", r.stdout)
	Expect(r.replies).To(HaveLen(1))
	var ce types.Error
	for name, b := range r.replies {
		Expect(name).To(HavePrefix(verb+"-"), "the plugin ran %s", name)
		Expect(json.Unmarshal(b, &ce)).To(Succeed(), "the plugin's reply: %s", b)
	}
	// What the operator reads: the same msg and details.
	Expect(r.stderr).To(ContainSubstring(ce.Msg))
	Expect(r.stderr).To(ContainSubstring(ce.Details))
	return &ce
}

// cnitoolContainerID is the container ID cnitool derives from the
// namespace path (it takes none): "cnitool-" and the first 10 bytes of the
// path's SHA-512, hex.
func cnitoolContainerID(netns string) string {
	s := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// args is the pod's CNI_ARGS, as kubelet passes them.
func (c *cnitool) args(p *pod) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=uid-%s",
		p.ns, p.name, cnitoolContainerID(p.netns.Path()), p.name)
}

// cached is the file libcni keeps the pod's ADD result in.
func (c *cnitool) cached(network string, p *pod) string {
	return filepath.Join(c.cache, "results", network+"-"+cnitoolContainerID(p.netns.Path())+"-eth0")
}

func (c *cnitool) add(network string, p *pod) *current.Result {
	r := c.run(c.args(p), "add", network, p.netns.Path())
	r.ok()
	res, err := current.NewResult([]byte(r.stdout))
	Expect(err).NotTo(HaveOccurred(), "cnitool add printed %s", r.stdout)
	out, err := current.NewResultFromResult(res)
	Expect(err).NotTo(HaveOccurred())
	// The result went to the test's cache, not the machine's.
	Expect(c.cached(network, p)).To(BeARegularFile())
	return out
}

func (c *cnitool) run1(verb, network string, p *pod) cnitoolRun {
	return c.run(c.args(p), verb, network, p.netns.Path())
}

func ipOf(a allocation) string { return a.IP }

// cnitool's runs are Serial: a spec that finds no /var/lib/cni makes the
// mount point and removes it at its end, which would detach the bind of
// another spec's cnitool running at that moment.
var _ = Describe("cnitool against vpc-cni", Label("ipv4", "real-kernel", "cni-1.1", "cnitool"), Serial, func() {
	It("checks a pod and names what is missing, and reports ipamd's health", func() {
		n := newNode("t3.medium")
		c := n.newCnitool("aws-cni")
		p := n.newPod("web-0")
		ip := podAddr(c.add("aws-cni", p))
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: cnitoolContainerID(p.netns.Path()),
			Pod: p.ns + "/" + p.name, IP: ip.String()}))
		c.run1("check", "aws-cni", p).ok()

		toPod := 0
		for _, r := range n.rulesFor(ip) {
			if r.Priority == 512 {
				toPod++
				Expect(n.Host.RuleDel(r)).To(Succeed())
			}
		}
		Expect(toPod).To(Equal(1), "the pod's rule 512")
		ruleMissing := fmt.Sprintf("rule 512 to %s/32 lookup main is missing", ip)
		routeMissing := fmt.Sprintf("route %s/32 dev %s in table main is missing", ip, ownership.HostVeth("eni", p.ns, p.name))
		ce := c.run1("check", "aws-cni", p).failed("CHECK")
		Expect(ce.Code).To(Equal(uint(104)))
		Expect(ce.Msg).To(Equal("the pod network is not as ADD left it"))
		Expect(ce.Details).To(Equal(ruleMissing), "only the rule is missing")

		routes := n.routesFor(ip)
		Expect(routes).To(HaveLen(1), "the pod's host route")
		Expect(n.Host.RouteDel(routes[0])).To(Succeed())
		ce = c.run1("check", "aws-cni", p).failed("CHECK")
		Expect(ce.Code).To(Equal(uint(104)))
		Expect(strings.Split(ce.Details, "\n")).To(ConsistOf(routeMissing, ruleMissing))

		status := c.run1("status", "aws-cni", p)
		status.ok()
		Expect(status.replies).To(HaveKey("STATUS-"), "the plugin answered STATUS")

		// DEL tears down what is left from the cached result.
		c.run1("del", "aws-cni", p).ok()
		n.reaped()
		Expect(n.rulesFor(ip)).To(BeEmpty())
		Expect(n.allocations()).To(BeEmpty())
		Expect(c.cached("aws-cni", p)).NotTo(BeAnExistingFile())

		n.killIpamd()
		ce = c.run1("status", "aws-cni", p).failed("STATUS")
		Expect(ce.Code).To(Equal(types.ErrPluginNotAvailable))
		Expect(ce.Msg).To(ContainSubstring("ipamd at unix://" + n.Sock))
	})

	It("GC: collects an attachment libcni no longer caches, DELs the cached ones, leaves other networks", func() {
		n := newNode("t3.medium")
		c := n.newCnitool("aws-cni", "aws-cni-b")
		cached, stale, other := n.newPod("web-0"), n.newPod("web-1"), n.newPod("web-2")
		cachedIP, staleIP := podAddr(c.add("aws-cni", cached)), podAddr(c.add("aws-cni", stale))
		otherIP := podAddr(c.add("aws-cni-b", other))

		// web-1's sandbox vanished without a DEL and the runtime lost its
		// record: its namespace goes, and with it the veth pair and its
		// route; its rules stay and ipamd still holds its address. Only
		// vpc-cni's GC, through ipamd's allocations, can find it. The veth
		// is deleted first, by hand: the kernel frees a closed namespace
		// (and its links) whenever it gets to it.
		Expect(n.Host.LinkDel(ownership.HostVeth("eni", stale.ns, stale.name))).To(Succeed())
		Expect(stale.netns.Close()).To(Succeed())
		Expect(os.Remove(c.cached("aws-cni", stale))).To(Succeed())
		Expect(n.rulesFor(staleIP)).NotTo(BeEmpty())
		Expect(n.allocations()).To(ContainElement(WithTransform(ipOf, Equal(staleIP.String()))))

		// cnitool v1.3.1 passes libcni no valid attachments: libcni DELs
		// every attachment of the network it has cached, then vpc-cni's GC
		// gets no cni.dev/valid-attachments and collects every allocation
		// of the network that is left. The netns argument is not used.
		gc := c.run("", "gc", "aws-cni", cached.netns.Path())
		gc.ok()
		// No DEL of web-1: libcni has no record of it.
		Expect(gc.replies).To(HaveLen(2))
		Expect(gc.replies).To(HaveKey("DEL-"+cnitoolContainerID(cached.netns.Path())), "libcni DELs the cached attachment")
		Expect(gc.replies).To(HaveKey("GC-"), "then the plugin's GC")
		n.reaped() // the DEL handed its pod's veth pair to ipamd

		Expect(n.rulesFor(staleIP)).To(BeEmpty(), "the stale attachment's rules")
		Expect(n.routesFor(staleIP)).To(BeEmpty(), "the stale attachment's routes")
		Expect(n.rulesFor(cachedIP)).To(BeEmpty(), "the cached attachment's rules")
		Expect(n.routesFor(cachedIP)).To(BeEmpty(), "the cached attachment's routes")
		Expect(c.cached("aws-cni", cached)).NotTo(BeAnExistingFile())
		Expect(n.allocations()).To(ConsistOf(allocation{ContainerID: cnitoolContainerID(other.netns.Path()),
			Pod: other.ns + "/" + other.name, IP: otherIP.String()}), "only the other network's address is held")
		Expect(n.rulesFor(otherIP)).To(HaveLen(1), "the other network's pod keeps its rule 512")
		Expect(c.cached("aws-cni-b", other)).To(BeARegularFile())
		c.run1("check", "aws-cni-b", other).ok()

		// A DEL of what GC took finds nothing left to do.
		c.run1("del", "aws-cni", cached).ok()
		c.run1("del", "aws-cni-b", other).ok()
		n.reaped()
		Expect(n.rulesFor(otherIP)).To(BeEmpty())
		Expect(n.routesFor(otherIP)).To(BeEmpty())
		Expect(n.allocations()).To(BeEmpty())
	})
})
