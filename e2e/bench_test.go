package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/benchstat"
)

// runs is BENCH_CRI_RUNS (default 20).
func runs() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_CRI_RUNS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// The bench (make bench, label "bench"; make e2e leaves it out): what
// containerd's sandbox calls cost with vpc-cni and with ptp + host-local,
// on two nodes built alike, the calls interleaved between them. It prints
// figures and fails only when something does not work.
var _ = Describe("containerd runp/stopp/rmp", Label("bench"), func() {
	It("with vpc-cni and with ptp + host-local, interleaved", func() {
		installPTP()
		nodes := []*node{newNodeFor("vpc-cni", "m5.large", "--ip-cooldown", "1s"), newNodeFor("ptp", "m5.large")}
		t := map[string]map[string][]time.Duration{}
		for _, n := range nodes {
			t[n.plugin] = map[string][]time.Duration{}
			n.cycle("warm", nil) // not counted
		}
		N := runs()
		for i := 0; i < N; i++ {
			for _, n := range nodes {
				n.cycle(fmt.Sprintf("pod-%d", i), t[n.plugin])
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\ncontainerd 1.6 CRI through crictl, %d runs each, interleaved (vpc-cni node, ptp node, ...)\n", N)
		benchstat.Header(&b, "call")
		for _, verb := range []string{"runp", "stopp", "rmp"} {
			benchstat.Compare(&b, verb, t["vpc-cni"][verb], t["ptp"][verb])
		}
		AddReportEntry("timings", b.String())
	})
})

// installPTP puts ptp and host-local in the CNI bin dir, once. ptp
// imports modules this go.sum does not list, so it is built at go.mod's
// version of containernetworking/plugins with its own module's go.sum.
func installPTP() {
	ptpOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containernetworking/plugins").Output()
		Expect(err).NotTo(HaveOccurred())
		v := strings.TrimSpace(string(out))
		cmd := exec.Command("go", "install", "github.com/containernetworking/plugins/plugins/main/ptp@"+v,
			"github.com/containernetworking/plugins/plugins/ipam/host-local@"+v)
		cmd.Env = append(os.Environ(), "GOBIN="+binDir)
		b, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go install ptp host-local: %s", b)
		fmt.Fprintf(GinkgoWriter, "ptp and host-local of containernetworking/plugins %s\n", v)
	})
}

var ptpOnce sync.Once

// cycle is one sandbox's life: runp (ADD), stopp (DEL with the netns and
// prevResult), rmp (DEL again with no netns). Only the calls are timed.
func (n *node) cycle(name string, t map[string][]time.Duration) {
	spec := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "default", "uid": "uid-" + name + "-" + fmt.Sprint(time.Now().UnixNano()), "attempt": 0},
		"hostname": name,
		"linux":    map[string]any{"cgroup_parent": n.cri.cgroupParent},
	}
	b, err := json.Marshal(spec)
	Expect(err).NotTo(HaveOccurred())
	f := filepath.Join(n.Dir, "pod-"+name+".json")
	Expect(os.WriteFile(f, b, 0o644)).To(Succeed())
	timed := func(verb string, args ...string) string {
		start := time.Now()
		out, err := n.cri.crictl(args...)
		d := time.Since(start)
		if err != nil {
			dumpFile("plugin log", n.pluginLog)
		}
		Expect(err).NotTo(HaveOccurred(), "%s %s (%s)", verb, name, n.plugin)
		if t != nil {
			t[verb] = append(t[verb], d)
		}
		return strings.TrimSpace(out)
	}
	id := timed("runp", "runp", f)
	out, err := n.cri.crictl("inspectp", "-o", "json", id)
	Expect(err).NotTo(HaveOccurred())
	var st struct {
		Status struct {
			State   string
			Network struct{ IP string }
		}
	}
	Expect(json.Unmarshal([]byte(out), &st)).To(Succeed())
	Expect(st.Status.State).To(Equal("SANDBOX_READY"))
	Expect(st.Status.Network.IP).NotTo(BeEmpty(), "%s has no pod IP", n.plugin)
	timed("stopp", "stopp", id)
	timed("rmp", "rmp", id)
}
