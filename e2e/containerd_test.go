package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// cri is containerd running in a node: its own root, state, socket, CNI
// dirs and config, so it shares nothing with a containerd the machine may
// run, inside the node's network namespace and a private mount namespace.
type cri struct {
	v2         bool   // containerd 2.4 (else Debian's 1.6)
	bin, ctr   string // its containerd and ctr
	env        []string
	dir        string
	sock       string
	crictlConf string
	cmd        *exec.Cmd
	exited     chan struct{} // closed once cmd.Wait returned
	log        *os.File
	mntNS      string // containerd's mount namespace, "mnt:[inode]"
	// The CNI dirs containerd reads, as its mount namespace sees them.
	cniBinDir, cniConfDir string
	cgroupParent          string // every pod's cgroups are under it
}

// hiddenDirs are paths containerd writes with no setting to move them:
// libcni's cache of each pod's ADD result, and the shims' sockets (s/) and
// runc's state (runc/). In containerd's mount namespace a directory of
// the node's is bind-mounted over each, so the machine's stay untouched
// (only an empty mount point is made, and removed, where one is missing).
// containerd 2.4 writes the same three (its socket_dir setting would move
// s/ alone, within 42 characters); what else it would write outside its
// root and state (NRI's socket) is turned off in its config.
var hiddenDirs = map[string]string{libcniDir: "cni-cache", "/run/containerd": "run"}

const libcniDir = "/var/lib/cni"

// cniVersion is the conflist's: 1.0.0 is the newest containerd 1.6
// accepts (it refuses a 1.1.0 result); containerd 2.4 speaks 1.1.0.
func (n *node) cniVersion() string {
	if n.runtime == containerd24 {
		return "1.1.0"
	}
	return "1.0.0"
}

// conflist chains vpc-cni with portmap, as the reference's 10-aws.conflist
// does. A "ptp" node (the bench's) has ptp + host-local alone, without
// NAT, as vpc-cni makes none either.
func (n *node) conflist() string {
	if n.plugin == "ptp" {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ptpnet","plugins":[
  {"type":"ptp","ipMasq":false,"mtu":9001,"ipam":{"type":"host-local","subnet":"10.99.0.0/16",
   "routes":[{"dst":"0.0.0.0/0"}],"dataDir":"%s"}}]}`, filepath.Join(n.Dir, "host-local"))
	}
	journal := ""
	if n.journal != "" {
		journal = fmt.Sprintf(`,"journalFile":%q`, n.journal)
	}
	return fmt.Sprintf(`{"cniVersion":%q,"name":"aws-cni","plugins":[
  {"type":"vpc-cni","mtu":"9001","vethPrefix":"eni","ipamdAddress":"unix://%s","ipamdTimeout":"2s",
   "pluginLogFile":"%s","pluginLogLevel":"debug","stateDir":%q%s},
  {"type":"portmap","capabilities":{"portMappings":true},"snat":true,"backend":"iptables"}]}`,
		n.cniVersion(), n.Sock, n.pluginLog, filepath.Join(n.Dir, "vpc-cni-state"), journal)
}

// containerdConfig is the CRI setup that works here
// (docs/testing.md#containerd-on-this-machine):
// without restrict_oom_score_adj runc fails ("can't get final child's PID
// from pipe: EOF": the process cannot lower oom_score_adj); AppArmor is not
// available; pod namespaces are mounted under the node's state dir;
// cgroupfs, since no systemd runs; the sandbox image is the local one, so
// containerd never tries to pull.
func (c *cri) config() string {
	if c.v2 {
		return c.configV2()
	}
	cri := `"io.containerd.grpc.v1.cri"`
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins.%s]
  sandbox_image = %q
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins.%s.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins.%s.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.%s.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.%s.cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.sock, c.sock+".ttrpc", filepath.Join(c.dir, "opt"),
		cri, pauseImage, cri, cri, cri, cri, c.cniBinDir, c.cniConfDir)
}

// startContainerd writes the CNI and containerd configs, starts containerd
// in the node and imports the pause image. Its cleanup removes every pod,
// stops containerd and its shims and removes the pods' cgroups.
func (n *node) startContainerd() {
	// Its own dir first on PATH: the shim it runs is the one beside it.
	c := &cri{dir: filepath.Join(n.Dir, "containerd"), bin: tools.containerd, ctr: tools.ctr,
		env: pathFirst(os.Environ(), filepath.Dir(tools.containerd))}
	if n.runtime == containerd24 {
		c.setV2()
	}
	n.cri = c
	c.sock = filepath.Join(c.dir, "containerd.sock")
	b := make([]byte, 4)
	rand.Read(b)
	c.cgroupParent = "/vpccni-e2e-" + hex.EncodeToString(b)
	binds := map[string]string{}
	for _, d := range []string{"net.d", "opt", "cdi"} {
		Expect(os.MkdirAll(filepath.Join(c.dir, d), 0o755)).To(Succeed())
	}
	for target, d := range hiddenDirs {
		binds[target] = filepath.Join(c.dir, d)
		Expect(os.MkdirAll(binds[target], 0o755)).To(Succeed())
	}
	c.cniBinDir, c.cniConfDir = binDir, filepath.Join(c.dir, "net.d")
	if n.kubelet {
		maps.Copy(binds, n.kubeletBinds())
	}
	if n.daemonSet {
		maps.Copy(binds, n.daemonSetBinds())
		c.cniBinDir, c.cniConfDir = "/opt/cni/bin", "/etc/cni/net.d"
	}
	for target := range binds {
		if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
			Expect(os.MkdirAll(target, 0o755)).To(Succeed())
			// Runs after containerd's cleanup; removes only an empty
			// directory: someone else may have started using it.
			DeferCleanup(os.Remove, target)
		}
	}
	if !n.daemonSet { // the DaemonSet writes its own
		Expect(os.WriteFile(filepath.Join(c.dir, "net.d", "10-aws.conflist"), []byte(n.conflist()), 0o644)).To(Succeed())
	}
	conf := filepath.Join(c.dir, "config.toml")
	Expect(os.WriteFile(conf, []byte(c.config()), 0o644)).To(Succeed())
	// crictl reads /etc/crictl.yaml unless told otherwise.
	c.crictlConf = filepath.Join(c.dir, "crictl.yaml")
	Expect(os.WriteFile(c.crictlConf, []byte(fmt.Sprintf(
		"runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n", c.sock, c.sock)), 0o644)).To(Succeed())

	prologue, err := mountPrologue(binds)
	Expect(err).NotTo(HaveOccurred())
	c.log, err = os.Create(filepath.Join(n.Dir, "containerd.log"))
	Expect(err).NotTo(HaveOccurred())
	// `ip netns exec` enters the node's network namespace and a private
	// mount namespace (mounts made there do not propagate back) with a
	// sysfs of the node's; it unmounts the cgroup hierarchies with the old
	// sysfs, so the prologue mounts them again, or runc fails with "no
	// cgroup mount found in mountinfo". Everything containerd mounts (pod
	// namespaces, rootfs overlays) lives and dies in that namespace.
	c.cmd = exec.Command(tools.ip, "netns", "exec", n.NS.Name(), "sh", "-ec", prologue+`exec "$@"`, "sh",
		c.bin, "--config", conf, "--log-level", "info")
	c.cmd.Env = c.env
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	Expect(c.cmd.Start()).To(Succeed())
	c.exited = make(chan struct{})
	go func() { c.cmd.Wait(); close(c.exited) }()
	DeferCleanup(c.stop)

	start := time.Now()
	Eventually(func() error {
		select {
		case <-c.exited:
			return StopTrying("containerd exited: " + c.cmd.ProcessState.String())
		default:
		}
		conds, err := c.conditions()
		if err != nil {
			return err
		}
		for _, cond := range conds {
			// A DaemonSet node has no conflist until aws-node writes it.
			if !cond.Status && !(n.daemonSet && cond.Type == "NetworkReady") {
				return fmt.Errorf("containerd not ready: %+v", conds)
			}
		}
		return nil
	}, 20*time.Second, 50*time.Millisecond).Should(Succeed(), "containerd's CRI (log %s)", c.log.Name())
	c.mntNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.cmd.Process.Pid))
	Expect(err).NotTo(HaveOccurred())
	self, _ := os.Readlink("/proc/self/ns/mnt")
	Expect(c.mntNS).NotTo(Equal(self), "containerd must run in a mount namespace of its own")

	out, err := exec.Command(c.ctr, "--address", c.sock, "-n", "k8s.io", "images", "import", imageTar).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "ctr images import: %s", out)
	fmt.Fprintf(GinkgoWriter, "containerd ready and pause image imported in %s\n", time.Since(start).Round(time.Millisecond))
}

// condition is one of the CRI Status call's runtime conditions.
type condition struct {
	Type            string
	Status          bool
	Reason, Message string
}

// conditions is the CRI Status call (`crictl info`, what kubelet polls):
// RuntimeReady, NetworkReady and (containerd 2.x)
// ContainerdHasNoDeprecationWarnings.
func (c *cri) conditions() ([]condition, error) {
	out, err := c.crictl("info")
	if err != nil {
		return nil, err
	}
	var info struct {
		Status struct{ Conditions []condition }
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, fmt.Errorf("crictl info: %w: %s", err, out)
	}
	return info.Status.Conditions, nil
}

// safeWord: what may go unquoted into the prologue.
var safeWord = regexp.MustCompile(`^[A-Za-z0-9_=,./:+-]+$`)

// mountPrologue is the shell that mounts, in containerd's mount namespace,
// the cgroup hierarchies this process sees (read from its mountinfo, so
// cgroup v1, v2 and hybrid machines all work), and the node's directories
// over hiddenDirs (binds: mount point -> the node's directory).
func mountPrologue(binds map[string]string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var sh strings.Builder
	// kubelet asks for HostToContainer propagation of /var/run/netns, which
	// containerd refuses unless the mount holding it is shared or a slave.
	// `ip netns exec` makes its namespace's tree a slave of the machine's,
	// which leaves it private where the machine's "/" is private: make the
	// tree shared here, in containerd's own namespace (peers of nothing
	// outside it, so no mount ever propagates back to the machine).
	sh.WriteString("mount --make-rshared /\n")
	cgroups := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		mp, fstype, super := fields[4], fields[sep+1], fields[sep+3]
		if mp != "/sys/fs/cgroup" && !strings.HasPrefix(mp, "/sys/fs/cgroup/") {
			continue
		}
		if !safeWord.MatchString(mp) || !safeWord.MatchString(super) {
			return "", fmt.Errorf("unexpected cgroup mount %q (%s)", mp, super)
		}
		cgroups++
		switch fstype {
		case "tmpfs":
			fmt.Fprintf(&sh, "mount -t tmpfs -o mode=755 tmpfs %s\n", mp)
		case "cgroup", "cgroup2":
			fmt.Fprintf(&sh, "mkdir -p %s\nmount -t %s -o %s %s %s\n", mp, fstype, super, fstype, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if cgroups == 0 {
		return "", errors.New("no cgroup hierarchy mounted under /sys/fs/cgroup")
	}
	// Links such as cpu -> cpu,cpuacct on some cgroup v1 machines.
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join("/sys/fs/cgroup", e.Name()))
		if err == nil && safeWord.MatchString(target) && safeWord.MatchString(e.Name()) {
			fmt.Fprintf(&sh, "ln -s %s /sys/fs/cgroup/%s\n", target, e.Name())
		}
	}
	// Parents first: a bind under another (/var/log/pods under /var/log)
	// must land in the mounted tree, not under it.
	targets := slices.Sorted(maps.Keys(binds))
	for _, target := range targets {
		dir := binds[target]
		if !safeWord.MatchString(dir) || !safeWord.MatchString(target) {
			return "", fmt.Errorf("unexpected path %q", dir)
		}
		fmt.Fprintf(&sh, "mount --bind %s %s\n", dir, target)
	}
	return sh.String(), nil
}

// crictl runs crictl against this containerd.
func (c *cri) crictl(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tools.crictl, append([]string{"--config", c.crictlConf}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// stop removes every pod (their DELs reach ipamd, which is still up:
// on a DaemonSet node the application pods go first, aws-node last),
// stops containerd, then kills what may be left of its process tree: the
// shims (in its mount namespace) and pause processes (in the pods'
// cgroups), and removes those cgroups. Pass or fail.
func (c *cri) stop() {
	if CurrentSpecReport().Failed() {
		dumpFile("containerd log", c.log.Name())
	}
	defer c.log.Close()
	select {
	case <-c.exited:
	default:
		if ids, err := c.crictl("pods", "-q", "--namespace", podNamespace); err == nil && strings.TrimSpace(ids) != "" {
			if out, err := c.crictl(append([]string{"rmp", "--force"}, strings.Fields(ids)...)...); err != nil {
				fmt.Fprintf(GinkgoWriter, "cleanup: %v %s\n", err, out)
			}
		}
		if out, err := c.crictl("rmp", "--all", "--force"); err != nil {
			fmt.Fprintf(GinkgoWriter, "cleanup: %v %s\n", err, out)
		}
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
	reap(c.procs(), c.cgroupDirs())
}

// reap kills what is left of a runtime's process tree (pids, and the
// processes in its cgroups) and removes the cgroups.
func reap(pids []int, groups []string) {
	for _, g := range groups {
		b, _ := os.ReadFile(filepath.Join(g, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		fmt.Fprintf(GinkgoWriter, "cleanup: killing leftover process %d\n", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// Deepest first: a cgroup with children cannot be removed.
	slices.SortFunc(groups, func(a, b string) int { return len(b) - len(a) })
	deadline := time.Now().Add(5 * time.Second)
	for _, g := range groups {
		for syscall.Rmdir(g) == syscall.EBUSY && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // its processes are still exiting
		}
	}
}

// procs lists the processes in containerd's mount namespace: containerd
// itself while it runs, its shims, and what they run.
func (c *cri) procs() []int {
	var pids []int
	if c.mntNS == "" {
		return nil
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == c.mntNS {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupDirs lists the pods' cgroups, in every hierarchy.
func (c *cri) cgroupDirs() []string {
	var out []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + c.cgroupParent)
	roots = append(roots, "/sys/fs/cgroup"+c.cgroupParent)
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}
