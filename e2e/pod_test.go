package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

// sandbox is a pod sandbox containerd runs for crictl runp.
type sandbox struct {
	id, name string
	ns       string // the pod's namespace in CNI_ARGS; "" is podNamespace
	ip       netip.Addr
	pid      int // the pause process: its /proc/PID/ns/net is the pod's namespace
}

const podNamespace = "default"

func (s *sandbox) hostVeth() string { return ownership.HostVeth("eni", s.namespace(), s.name) }

func (s *sandbox) namespace() string {
	if s.ns == "" {
		return podNamespace
	}
	return s.ns
}
func (s *sandbox) netns() string { return fmt.Sprintf("/proc/%d/ns/net", s.pid) }

// portMapping is one of the CRI's PodSandboxConfig.port_mappings (TCP).
type portMapping struct {
	ContainerPort int `json:"container_port"`
	HostPort      int `json:"host_port"`
}

// timings are the CRI calls' (or podman commands') durations, reported at
// the end of a spec.
type timings map[string][]time.Duration

func (t timings) add(verb string, d time.Duration) { t[verb] = append(t[verb], d) }

// runp is `crictl runp`: containerd makes the pod's namespace and runs
// the CNI ADD of the conflist (loopback for lo, then vpc-cni and portmap).
func (n *node) runp(t timings, name string, ports ...portMapping) *sandbox {
	spec := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": podNamespace, "uid": "uid-" + name + "-" + fmt.Sprint(time.Now().UnixNano()), "attempt": 0},
		"hostname": name,
		"linux":    map[string]any{"cgroup_parent": n.cri.cgroupParent},
	}
	if len(ports) > 0 {
		spec["port_mappings"] = ports
	}
	b, err := json.Marshal(spec)
	Expect(err).NotTo(HaveOccurred())
	f := filepath.Join(n.Dir, "pod-"+name+".json")
	Expect(os.WriteFile(f, b, 0o644)).To(Succeed())
	start := time.Now()
	out, err := n.cri.crictl("runp", f)
	Expect(err).NotTo(HaveOccurred(), "runp %s", name)
	t.add("runp", time.Since(start))
	s := &sandbox{id: strings.TrimSpace(out), name: name}
	st := n.inspectp(s)
	Expect(st.Status.State).To(Equal("SANDBOX_READY"))
	s.ip, err = netip.ParseAddr(st.Status.Network.IP)
	Expect(err).NotTo(HaveOccurred(), "pod IP %q", st.Status.Network.IP)
	s.pid = st.Info.Pid
	Expect(s.pid).To(BeNumerically(">", 0))
	return s
}

// podStatus is what we read of `crictl inspectp -o json`.
type podStatus struct {
	Status struct {
		State   string
		Network struct{ IP string }
	}
	Info struct{ Pid int }
}

func (n *node) inspectp(s *sandbox) podStatus {
	out, err := n.cri.crictl("inspectp", "-o", "json", s.id)
	Expect(err).NotTo(HaveOccurred())
	var st podStatus
	Expect(json.Unmarshal([]byte(out), &st)).To(Succeed(), out)
	return st
}

// stopp is `crictl stopp`: the pause process is stopped and the CNI DEL
// runs with the pod's namespace and the cached ADD result as prevResult.
func (n *node) stopp(t timings, s *sandbox) {
	start := time.Now()
	_, err := n.cri.crictl("stopp", s.id)
	Expect(err).NotTo(HaveOccurred(), "stopp %s", s.name)
	t.add("stopp", time.Since(start))
	Expect(n.inspectp(s).Status.State).To(Equal("SANDBOX_NOTREADY"))
}

// rmp is `crictl rmp`: containerd runs the CNI DEL a second time, with
// CNI_NETNS empty and no prevResult (the cache went with the first DEL).
func (n *node) rmp(t timings, s *sandbox) {
	start := time.Now()
	_, err := n.cri.crictl("rmp", s.id)
	Expect(err).NotTo(HaveOccurred(), "rmp %s", s.name)
	t.add("rmp", time.Since(start))
	_, err = n.cri.crictl("inspectp", s.id)
	Expect(err).To(HaveOccurred(), "the sandbox is gone")
}

// report prints the CRI calls' (or podman commands') timings of the spec.
func (t timings) report() {
	for _, verb := range []string{"runp", "stopp", "rmp", "podman run", "podman stop", "podman rm"} {
		if len(t[verb]) > 0 {
			fmt.Fprintf(GinkgoWriter, "%s: %v\n", verb, t[verb])
			AddReportEntry(verb, fmt.Sprint(t[verb]))
		}
	}
}

// expectUp checks the kernel objects of a running pod: on the node its
// host veth (up), the host route to its address through that veth, rule
// 512 (to the address, main table) and, for a pod on a secondary ENI,
// rule 1536 (from the address to the ENI's table); in the pod's namespace
// eth0 with the address, the link-local gateway's default route and its
// permanent neighbour entry, and lo up (the loopback plugin).
func (n *node) expectUp(s *sandbox, table int) {
	hv, err := n.Host.LinkByName(s.hostVeth())
	Expect(err).NotTo(HaveOccurred(), "host veth of %s", s.name)
	Expect(hv.Up).To(BeTrue())
	Expect(n.routesFor(s.ip)).To(ConsistOf(And(
		WithTransform(func(r kernel.Route) int { return r.LinkIndex }, Equal(hv.Index)),
		WithTransform(func(r kernel.Route) int { return r.Table }, Equal(kernel.TableMain)))), "host route of %s", s.ip)
	type rule struct{ Prio, Table int }
	want := []rule{{512, kernel.TableMain}}
	if table != kernel.TableMain {
		want = append(want, rule{1536, table})
	}
	var got []rule
	for _, r := range n.rulesFor(s.ip) {
		got = append(got, rule{r.Priority, r.Table})
	}
	Expect(got).To(ConsistOf(want), "rules of %s", s.ip)

	h, err := linux.Opener{}.Open(s.netns())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	lo, err := h.LinkByName("lo")
	Expect(err).NotTo(HaveOccurred())
	Expect(lo.Up).To(BeTrue(), "lo of %s", s.name)
	eth0, err := h.LinkByName("eth0")
	Expect(err).NotTo(HaveOccurred())
	Expect(eth0.Up).To(BeTrue())
	Expect(eth0.MTU).To(Equal(9001))
	fam, bits, gw := kernel.FamilyV4, 32, "169.254.1.1"
	if s.ip.Is6() {
		fam, bits, gw = kernel.FamilyV6, 128, "fe80::1"
	}
	addrs, err := h.AddrList(eth0.Index, fam)
	Expect(err).NotTo(HaveOccurred())
	Expect(addrs).To(ContainElement(And(
		WithTransform(func(a kernel.Addr) string { return a.IPNet.String() }, Equal(fmt.Sprintf("%s/%d", s.ip, bits))),
		WithTransform(func(a kernel.Addr) int { return a.Flags & kernel.AddrFlagTentative }, Equal(0)))), "eth0 of %s", s.name)
	routes, err := h.RouteList(fam, kernel.TableMain)
	Expect(err).NotTo(HaveOccurred())
	Expect(routes).To(ContainElement(And(
		WithTransform(func(r kernel.Route) bool { return r.Dst == nil || r.Dst.IP.IsUnspecified() }, BeTrue()),
		WithTransform(func(r kernel.Route) string { return r.Gw.String() }, Equal(gw)))), "default route of %s", s.name)
	neighs, err := h.NeighList(eth0.Index, fam)
	Expect(err).NotTo(HaveOccurred())
	Expect(neighs).To(ContainElement(And(
		WithTransform(func(nb kernel.Neigh) string { return nb.IP.String() }, Equal(gw)),
		WithTransform(func(nb kernel.Neigh) string { return nb.HardwareAddr.String() }, Equal(hv.HardwareAddr.String())),
		WithTransform(func(nb kernel.Neigh) int { return nb.State & kernel.NeighStatePermanent }, Equal(kernel.NeighStatePermanent)))))

	Expect(n.allocations()).To(ContainElement(allocation{ContainerID: s.id, Pod: s.namespace() + "/" + s.name, IP: s.ip.String()}))
}

// expectGone: nothing of the pod is left on the node: no rule or route
// naming its address, no host veth, and its pause process has exited.
func (n *node) expectGone(s *sandbox) {
	n.reaped()
	a := net.IP(s.ip.AsSlice())
	rules, err := n.Host.RuleList(kernel.FamilyAll)
	Expect(err).NotTo(HaveOccurred())
	for _, r := range rules {
		for _, sel := range []*net.IPNet{r.Src, r.Dst} {
			Expect(sel != nil && sel.IP.Equal(a)).To(BeFalse(), "rule left behind: %+v", r)
		}
	}
	Expect(n.routesFor(s.ip)).To(BeEmpty(), "route left behind")
	_, err = n.Host.LinkByName(s.hostVeth())
	Expect(kernel.IsNotFound(err)).To(BeTrue(), "host veth %s left behind (%v)", s.hostVeth(), err)
	Expect(s.netns()).NotTo(BeAnExistingFile(), "the pause process of %s still runs", s.name)
}

// expectReleased: ipamd no longer holds the pod's address.
func (n *node) expectReleased(s *sandbox) {
	n.reaped()
	for _, a := range n.allocations() {
		Expect(a.ContainerID).NotTo(Equal(s.id), "ipamd still holds %s", a.IP)
		Expect(a.IP).NotTo(Equal(s.ip.String()), "ipamd still holds the address for %s", a.Pod)
	}
}

// snapshot is every kernel object of the node namespace.
func (n *node) snapshot() []string {
	n.reaped()
	st, err := kernel.Snapshot(n.Host)
	Expect(err).NotTo(HaveOccurred())
	return st.Lines()
}

// podSnapshot is every kernel object of a running pod's namespace.
func podSnapshot(s *sandbox) []string {
	h, err := linux.Opener{}.Open(s.netns())
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	st, err := kernel.Snapshot(h)
	Expect(err).NotTo(HaveOccurred())
	return st.Lines()
}

// pluginDELs returns the netns of each line the plugin logged (JSON, one
// object a line) for a DEL of the sandbox.
func (n *node) pluginDELs(s *sandbox) []string {
	b, err := os.ReadFile(n.pluginLog)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct{ Verb, ContainerID, Netns string }
		Expect(json.Unmarshal([]byte(l), &e)).To(Succeed(), "plugin log line %q", l)
		if e.Verb == "DEL" && e.ContainerID == s.id {
			out = append(out, e.Netns)
		}
	}
	return out
}

// cachedResult says whether containerd's CNI library holds the sandbox's
// ADD result (what it hands the plugin as prevResult on DEL).
func (n *node) cachedResult(s *sandbox) bool {
	_, err := os.Stat(filepath.Join(n.cri.dir, hiddenDirs[libcniDir], "results", "aws-cni-"+s.id+"-eth0"))
	return err == nil
}
