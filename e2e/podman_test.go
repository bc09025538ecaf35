package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/plugin"
)

// podman is a strict libcni caller: it parses every "mac" of an interface
// with an address as a MAC address, so it runs a container on vpc-cni only
// with resultFormat "spec" (docs/architecture.md#result-formats). These
// specs run Debian's podman 4.3 (CNI backend, up to CNI 1.0.0; it sends
// VERSION before each ADD and DEL) in the node namespace, in a private
// mount namespace, with a rootfs holding the suite's pause binary (no
// image).
var _ = Describe("podman 4.3 drives vpc-cni (resultFormat spec)", Label("podman"), Serial, func() {
	var t timings
	BeforeEach(func() {
		requirePodman()
		t = timings{}
		DeferCleanup(func() { t.report() })
	})

	It("runs a container, reaches it, and stop and rm leave nothing of it on the node", func() {
		n := newPodmanNode("m5.large", plugin.ResultFormatSpec)
		before := n.snapshot()
		c := n.pm.run(t, "web-0")
		n.expectPodmanUp(c, kernel.TableMain)
		Expect(n.ping(c.ip)).To(Succeed(), "ICMP echo from the node namespace to %s", c.ip)
		Expect(n.pm.verbs()).To(Equal([]string{"VERSION", "ADD"}), "what podman ran of vpc-cni")

		n.pm.stop(t, c)
		Expect(n.pm.verbs()).To(Equal([]string{"VERSION", "ADD", "VERSION", "DEL"}), "what podman ran of vpc-cni")
		Expect(n.snapshot()).To(Equal(before), "the node's kernel objects after podman stop")
		n.expectReleased(c.sandbox)
		n.pm.rm(t, c)
		Expect(n.snapshot()).To(Equal(before), "the node's kernel objects after podman rm")
		Expect(n.allocations()).To(BeEmpty())
	})

	It("tears a container down after ipamd was SIGKILLed and restarted without its checkpoint", Label("incident-2048"), func() {
		n := newPodmanNode("m5.large", plugin.ResultFormatSpec)
		before := n.snapshot()
		c := n.pm.run(t, "web-0")
		n.expectPodmanUp(c, kernel.TableMain)
		Expect(n.ping(c.ip)).To(Succeed())

		By("aws-node is evicted (ipamd SIGKILLed) and comes back without its checkpoint")
		n.evictIpamd()
		Expect(os.Remove(n.Checkpoint())).To(Succeed())
		n.startIpamd(n.instanceType, n.ipamdArgs...)

		By("podman stop and rm: nothing of the container is left")
		n.pm.stop(t, c)
		n.pm.rm(t, c)
		Expect(n.snapshot()).To(Equal(before), "the node's kernel objects after the container")
		n.expectReleased(c.sandbox)
	})

	It("refuses the default (reference) result format: podman's run fails on the MAC, and its DEL leaves nothing", func() {
		n := newPodmanNode("m5.large", plugin.ResultFormatReference)
		before := n.snapshot()
		out, code := n.pm.runFails(t, "web-0")
		Expect(code).To(Equal(126), "podman run's exit status:\n%s", out)
		Expect(out).To(MatchRegexp(`Error: address \d+: invalid MAC address`))
		Expect(n.snapshot()).To(Equal(before), "the node's kernel objects after podman's DEL")
		Expect(n.allocations()).To(BeEmpty(), "ipamd released the address")
		// The DEL is the same podman process's, undoing its failed ADD:
		// it asked VERSION once, before the ADD.
		Expect(n.pm.verbs()).To(Equal([]string{"VERSION", "ADD", "DEL"}), "podman ran vpc-cni's ADD, then its DEL")
	})
})

// podmanNetwork is the network podman runs the containers on.
const podmanNetwork = "vpccni"

// podmanNamespace is what the containers' K8S_POD_NAMESPACE says: podman
// passes K8S_POD_NAME (the container's name) and whatever $CNI_ARGS adds.
const podmanNamespace = "podman"

// podmanMissing says what the podman specs lack ("" when nothing).
var podmanMissing string

// findPodman looks podman and conmon up (the specs need them; the other
// specs do not).
func findPodman() {
	var missing []string
	for _, b := range []string{"podman", "conmon"} {
		if _, err := exec.LookPath(b); err != nil {
			if _, err := os.Stat("/usr/libexec/podman/" + b); err != nil {
				missing = append(missing, b)
			}
		}
	}
	if len(missing) > 0 {
		podmanMissing = strings.Join(missing, ", ")
		return
	}
	out, err := exec.Command("podman", "--version").Output()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "podman version 4.") {
		podmanMissing = fmt.Sprintf("podman 4.x (podman --version says %q, %v)", strings.TrimSpace(string(out)), err)
	}
}

// requirePodman fails a podman spec when podman is not installed.
func requirePodman() {
	if podmanMissing != "" {
		gate("the podman specs need " + podmanMissing + ": run make tools (apt-get install podman)")
	}
}

// newPodmanNode is a node (ipamd in its namespace, no containerd) whose
// podman runs vpc-cni with the given resultFormat.
func newPodmanNode(instanceType, format string, ipamdArgs ...string) *node {
	n := buildNode(&node{plugin: "vpc-cni", runtime: podman43}, instanceType, ipamdArgs...)
	n.journal = filepath.Join(n.Dir, "journal.jsonl")
	n.startPodman(format)
	return n
}

// container is one `podman run -d`.
type container struct {
	*sandbox        // id, name (the container's), ip, pid
	mac      string // eth0's MAC as podman reports it
}

// expectPodmanUp is expectUp for a podman container, which podman also
// shows with eth0's real MAC.
func (n *node) expectPodmanUp(c *container, table int) {
	n.expectUp(c.sandbox, table)
	h, err := linux.Opener{}.Open(c.netns())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	Expect(err).NotTo(HaveOccurred())
	Expect(c.mac).To(Equal(eth0.HardwareAddr.String()), "podman's MAC for eth0 is the kernel's")
}

// verbs are the CNI_COMMANDs podman ran vpc-cni with, in order (the
// journal has no VERSION: skel answers it before the plugin's code runs).
func (p *podman) verbs() []string {
	b, err := os.ReadFile(filepath.Join(p.dir, "verbs.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.Fields(string(b))
}

// ping sends ICMP echo requests from the node namespace to a until one is
// answered (a few tries: the first may wait for the neighbour entry).
func (n *node) ping(a netip.Addr) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = n.NS.Do(func() error { return echo(a, uint16(i)) }); err == nil {
			return nil
		}
	}
	return err
}

// echo is one ICMP echo request to an IPv4 address and its reply, on a raw
// socket of the calling thread's network namespace (there is no ping on
// this machine).
func echo(a netip.Addr, seq uint16) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(2 * time.Second))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	id := uint16(os.Getpid())
	msg := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'v', 'p', 'c', 'c', 'n', 'i'}
	binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet4{Addr: a.As4()}); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("no echo reply from %s: %w", a, err)
		}
		src, ok := from.(*syscall.SockaddrInet4)
		if !ok || netip.AddrFrom4(src.Addr) != a || n < 20 {
			continue
		}
		icmp := buf[int(buf[0]&0x0f)*4 : n] // after the IP header
		if len(icmp) >= 8 && icmp[0] == 0 && binary.BigEndian.Uint16(icmp[4:]) == id && binary.BigEndian.Uint16(icmp[6:]) == seq {
			return nil
		}
	}
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// podman is podman on a node: every command runs, through nsenter, in the
// network namespace and the private mount namespace of a holder process
// (`ip netns exec`: the node's namespace, a mount namespace of its own,
// the cgroup hierarchies mounted again as for containerd). conmon and the
// containers stay there too. Its storage, state, locks, events, network
// config and CNI cache are the node's directories, bound in that mount
// namespace over each fixed path podman insists on (podmanHidden).
type podman struct {
	dir          string
	env          []string
	holder       *exec.Cmd
	exited       chan struct{}
	mntNS        string
	cgroupParent string
	rootfs       string
	log          *os.File
}

// podmanHidden are fixed paths podman may write under, each with the
// node's directory bound over it in podman's mount namespace. With the
// configuration below podman writes two: libcni's result cache and the
// containers' network namespaces (its netns package has no setting); they
// are always bound (an empty mount point is made, and removed, where the
// machine has none). The others are its defaults for storage, state, tmp
// dir, CNI config and locks, all moved by the configuration: bound only
// where the machine has them, and never made. Every one is compared
// before and after the spec.
var podmanHidden = []struct {
	path, dir string
	written   bool
}{
	{libcniDir, "cni-cache", true},
	{"/run/netns", "netns", true},
	{"/run/containers", "run-containers", false},
	{"/var/lib/containers", "var-lib-containers", false},
	{"/run/libpod", "run-libpod", false},
	{"/etc/cni/net.d", "etc-cni-net.d", false},
	{"/dev/shm", "shm", false},
}

// volatileHidden are hidden paths other users of the machine write to
// meanwhile (network namespaces, shared memory): only the entries podman
// would make there (its netns-<uuid>, its libpod locks) are compared.
var volatileHidden = map[string]string{"/run/netns": "netns-", "/dev/shm": "libpod"}

// conflist is the podman network: vpc-cni alone (podman maps no ports
// here), at CNI 1.0.0, journaling every verb.
func (n *node) podmanConflist(format string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[
  {"type":"vpc-cni","mtu":"9001","vethPrefix":"eni","ipamdAddress":"unix://%s","ipamdTimeout":"2s",
   "pluginLogFile":"%s","pluginLogLevel":"debug","journalFile":%q,"resultFormat":%q,"stateDir":%q}]}`,
		podmanNetwork, n.Sock, n.pluginLog, n.journal, format, filepath.Join(n.Dir, "vpc-cni-state"))
}

// startPodman writes podman's configuration, checks that the machine's
// hidden paths end as they were, and starts the holder. Its cleanup
// removes every container (their DELs reach ipamd while it runs), kills
// what is left in podman's mount namespace and removes the cgroups.
func (n *node) startPodman(format string) {
	p := &podman{dir: filepath.Join(n.Dir, "podman")}
	n.pm = p
	b := make([]byte, 4)
	rand.Read(b)
	p.cgroupParent = "/vpccni-e2e-" + hex.EncodeToString(b)
	for _, d := range []string{"storage", "runroot", "tmp", "net.d", "rootfs", "cni-bin"} {
		Expect(os.MkdirAll(filepath.Join(p.dir, d), 0o755)).To(Succeed())
	}
	binds := map[string]string{}
	for _, h := range podmanHidden {
		target := h.path
		_, err := os.Stat(target)
		switch {
		case err == nil:
		case !errors.Is(err, fs.ErrNotExist):
			Fail(err.Error())
		case h.written:
			Expect(os.MkdirAll(target, 0o755)).To(Succeed())
			DeferCleanup(os.Remove, target) // only if still empty
		default:
			target = "" // not bound: it must stay absent
		}
		if target != "" {
			binds[target] = filepath.Join(p.dir, h.dir)
			Expect(os.MkdirAll(binds[target], 0o755)).To(Succeed())
		}
		target = h.path
		before := hiddenTree(target)
		DeferCleanup(func() {
			Expect(hiddenTree(target)).To(Equal(before), "the machine's %s after podman", target)
		})
	}
	// The rootfs: the pause binary alone (podman makes the mount points).
	p.rootfs = filepath.Join(p.dir, "rootfs")
	pause, err := os.ReadFile(filepath.Join(binDir, "pause"))
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(p.rootfs, "pause"), pause, 0o755)).To(Succeed())

	// podman finds vpc-cni first in cni-bin: a shim that notes each
	// CNI_COMMAND, then runs the suite's vpc-cni. The paths are the test's
	// temporary directories: nothing in them the shell would expand.
	shim := fmt.Sprintf("#!/bin/sh\necho \"$CNI_COMMAND\" >>%q\nexec %q\n", filepath.Join(p.dir, "verbs.log"), filepath.Join(binDir, "vpc-cni"))
	Expect(os.WriteFile(filepath.Join(p.dir, "cni-bin", "vpc-cni"), []byte(shim), 0o755)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(p.dir, "net.d", "10-vpccni.conflist"), []byte(n.podmanConflist(format)), 0o644)).To(Succeed())
	conf, storage := filepath.Join(p.dir, "containers.conf"), filepath.Join(p.dir, "storage.conf")
	Expect(os.WriteFile(conf, []byte(p.containersConf()), 0o644)).To(Succeed())
	Expect(os.WriteFile(storage, []byte(fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n",
		filepath.Join(p.dir, "storage"), filepath.Join(p.dir, "runroot"))), 0o644)).To(Succeed())
	p.env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + p.dir,
		"CONTAINERS_CONF=" + conf, "CONTAINERS_STORAGE_CONF=" + storage, "CONTAINERS_REGISTRIES_CONF=/dev/null",
		"TMPDIR=" + filepath.Join(p.dir, "tmp"), "CNI_ARGS=" + podmanCNIArgs}

	prologue, err := mountPrologue(binds)
	Expect(err).NotTo(HaveOccurred())
	p.log, err = os.Create(filepath.Join(n.Dir, "podman.log"))
	Expect(err).NotTo(HaveOccurred())
	p.holder = exec.Command(tools.ip, "netns", "exec", n.NS.Name(), "sh", "-ec", prologue+"echo ready\nexec sleep infinity")
	ready := &testns.SyncBuffer{}
	p.holder.Stdout, p.holder.Stderr = ready, p.log
	Expect(p.holder.Start()).To(Succeed())
	p.exited = make(chan struct{})
	go func() { p.holder.Wait(); close(p.exited) }()
	DeferCleanup(p.stopAll, n)
	Eventually(func() string {
		select {
		case <-p.exited:
			return "exited"
		default:
		}
		return ready.String()
	}, 10*time.Second, 20*time.Millisecond).Should(Equal("ready\n"), "podman's mount namespace (log %s)", p.log.Name())
	p.mntNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.holder.Process.Pid))
	Expect(err).NotTo(HaveOccurred())
	self, _ := os.Readlink("/proc/self/ns/mnt")
	Expect(p.mntNS).NotTo(Equal(self), "podman must run in a mount namespace of its own")
}

// podmanCNIArgs completes what podman passes vpc-cni in CNI_ARGS: it sets
// K8S_POD_NAME to the container's name and adds $CNI_ARGS; vpc-cni's ADD
// needs the pod's namespace too.
const podmanCNIArgs = "K8S_POD_NAMESPACE=" + podmanNamespace

// containersConf is podman's configuration: the CNI backend with the
// suite's plugins and the node's network dir; cgroupfs (no systemd); file
// events and locks in its own dirs; ulimits this process may set (with
// podman's defaults runc fails: "error setting rlimit type 7: operation
// not permitted"). conmon
// runs podman's cleanup of an exited container with conmon_env_vars as its
// environment: $CNI_ARGS goes there too, or that DEL would not name the
// pod's namespace.
func (p *podman) containersConf() string {
	return fmt.Sprintf(`[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
cgroup_manager = "cgroupfs"
conmon_env_vars = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CNI_ARGS=%s"]
events_logger = "file"
events_logfile_path = %q
lock_type = "file"
runtime = "runc"
static_dir = %q
tmp_dir = %q
volume_path = %q

[network]
network_backend = "cni"
cni_plugin_dirs = [%q, %q]
network_config_dir = %q
default_network = %q
`, podmanCNIArgs, filepath.Join(p.dir, "events.log"), filepath.Join(p.dir, "storage", "libpod"), filepath.Join(p.dir, "tmp"),
		filepath.Join(p.dir, "storage", "volumes"), filepath.Join(p.dir, "cni-bin"), binDir, filepath.Join(p.dir, "net.d"), podmanNetwork)
}

// podman runs one podman command in podman's namespaces.
func (p *podman) podman(args ...string) (string, int) {
	cmd := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(p.holder.Process.Pid), "-m", "-n", "--", "podman"}, args...)...)
	cmd.Env = p.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	fmt.Fprintf(p.log, "$ podman %s\n%s", strings.Join(args, " "), out.String())
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), code
}

func (p *podman) runArgs(name string) []string {
	return []string{"run", "-d", "--name", name, "--network", podmanNetwork, "--cgroup-parent", p.cgroupParent,
		"--rootfs", p.rootfs, "/pause"}
}

// run is `podman run -d`: podman makes the container's namespace and runs
// the CNI ADD (after VERSION).
func (p *podman) run(t timings, name string) *container {
	start := time.Now()
	out, code := p.podman(p.runArgs(name)...)
	Expect(code).To(Equal(0), "podman run %s:\n%s", name, out)
	t.add("podman run", time.Since(start))
	c := &container{sandbox: &sandbox{id: lastLine(out), name: name, ns: podmanNamespace}}
	out, code = p.podman("inspect", c.id)
	Expect(code).To(Equal(0), "podman inspect:\n%s", out)
	var st []struct {
		State struct {
			Running bool
			Pid     int
		}
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress, MacAddress string }
		}
	}
	Expect(json.Unmarshal([]byte(out), &st)).To(Succeed(), out)
	Expect(st).To(HaveLen(1))
	Expect(st[0].State.Running).To(BeTrue())
	c.pid = st[0].State.Pid
	nw, ok := st[0].NetworkSettings.Networks[podmanNetwork]
	Expect(ok).To(BeTrue(), "podman inspect shows network %s: %s", podmanNetwork, out)
	var err error
	c.ip, err = netip.ParseAddr(nw.IPAddress)
	Expect(err).NotTo(HaveOccurred(), "the container's IP %q", nw.IPAddress)
	c.mac = nw.MacAddress
	return c
}

// runFails is a `podman run -d` that must fail: its output and status.
func (p *podman) runFails(t timings, name string) (string, int) {
	start := time.Now()
	out, code := p.podman(p.runArgs(name)...)
	t.add("podman run", time.Since(start))
	Expect(code).NotTo(Equal(0), "podman run %s succeeded:\n%s", name, out)
	return out, code
}

// stop is `podman stop`: the container is stopped and podman runs the CNI
// DEL (after VERSION) with the netns and the cached ADD result.
func (p *podman) stop(t timings, c *container) {
	start := time.Now()
	out, code := p.podman("stop", "-t", "5", c.id)
	Expect(code).To(Equal(0), "podman stop:\n%s", out)
	t.add("podman stop", time.Since(start))
	Expect(c.netns()).NotTo(BeAnExistingFile(), "the pause process of %s still runs", c.name)
}

// rm is `podman rm`.
func (p *podman) rm(t timings, c *container) {
	start := time.Now()
	out, code := p.podman("rm", c.id)
	Expect(code).To(Equal(0), "podman rm:\n%s", out)
	t.add("podman rm", time.Since(start))
	_, code = p.podman("container", "exists", c.id)
	Expect(code).To(Equal(1), "the container is gone")
}

// stopAll removes every container while ipamd still runs, stops the
// holder, then kills whatever is left in podman's mount namespace (conmon,
// pause) and removes the containers' cgroups. Pass or fail.
func (p *podman) stopAll(n *node) {
	if CurrentSpecReport().Failed() {
		dumpFile("podman log", p.log.Name())
	}
	defer p.log.Close()
	select {
	case <-p.exited:
	default:
		if out, code := p.podman("rm", "--all", "--force"); code != 0 {
			fmt.Fprintf(GinkgoWriter, "cleanup: podman rm --all: %s\n", out)
		}
		p.holder.Process.Kill()
		<-p.exited
	}
	rt := &cri{mntNS: p.mntNS, cgroupParent: p.cgroupParent}
	reap(rt.procs(), rt.cgroupDirs())
}

// hiddenTree lists a hidden path's tree (as cnitool's spec does for
// libcni's cache); for a volatile one, only what podman would name.
func hiddenTree(dir string) map[string]string {
	out := map[string]string{}
	prefix, volatile := volatileHidden[dir]
	Expect(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil // another user's entry, gone meanwhile
			}
			return err
		}
		if volatile && p != dir && !strings.HasPrefix(d.Name(), prefix) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		out[p] = fmt.Sprintf("%v %d %v", fi.Mode(), fi.Size(), fi.ModTime())
		if volatile && p == dir {
			out[p] = "" // its own mtime changes with the others' entries
		}
		return nil
	})).To(Succeed())
	return out
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[len(l)-1])
}
