// Command cnibench measures CNI ADD and DEL of three plugins side by side
// on the real kernel, in network namespaces it creates (never the
// machine's own): vpc-cni and the reference AWS VPC CNI plugin (aws-cni,
// built by make tools) against one running ipamd --cloud memory, and ptp +
// host-local. All three are driven the same way: libcni from Go, from
// inside a node namespace, through the jail the reference needs
// (internal/testsupport/refcni), a fresh pod namespace per run, interleaved (the
// order rotating every round). The timed region is the plugin process
// alone; namespace, mount and jail set-up are measured and reported apart.
//
// It measures at each level of pods already on the node (background pods
// added by vpc-cni, so rule and route dumps are realistic), prints the
// table and the cost curve, and writes them as JSON. It then measures
// vpc-cni's DEL while ipamd is stopped with SIGSTOP.
//
// It prints figures; it fails only when something does not work (an ADD or
// DEL error, a pod left behind), never on a time. Run as root (make bench).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/vpccni/vpccni/internal/testsupport/refcni"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ownership"
)

func main() {
	binDir := flag.String("bin", "bin/bench", "directory holding vpc-cni, ipamd, ptp and host-local")
	refBin := flag.String("ref", os.Getenv(refcni.EnvBinary), "the reference plugin (aws-cni; make tools builds it, $"+refcni.EnvBinary+")")
	runs := flag.Int("n", 30, "runs of ADD+DEL per plugin and level (interleaved)")
	levels := flag.String("pods", "1,30,110,250", "pods on the node while measuring (the measured pod included), comma-separated; "+
		"the table shows 1 and 110 when measured, the curve all")
	hangRuns := flag.Int("hang-runs", 5, "DELs measured while ipamd is SIGSTOPped")
	timeout := flag.Duration("ipamd-timeout", time.Second, "vpc-cni's ipamdTimeout")
	jsonOut := flag.String("json", "", "write the figures as JSON to this file too")
	verbose := flag.Bool("v", false, "plugin stderr and ipamd output to stderr")
	flag.Parse()
	lv, err := parseLevels(*levels)
	if err != nil {
		fatal(err)
	}
	if err := testns.RequireRoot(); err != nil {
		fatal(err)
	}
	abs, err := filepath.Abs(*binDir)
	if err != nil {
		fatal(err)
	}
	for _, b := range []string{"vpc-cni", "ipamd", "ptp", "host-local"} {
		if _, err := os.Stat(filepath.Join(abs, b)); err != nil {
			fatal(fmt.Errorf("%s: %w (make bench builds it)", b, err))
		}
	}
	if *refBin == "" {
		fatal(fmt.Errorf("no reference plugin: -ref or $%s (make tools builds it; make bench passes it)", refcni.EnvBinary))
	}
	var out io.Writer = io.Discard
	if *verbose {
		out = os.Stderr
	}
	// c5.18xlarge: 15 ENIs of 49 pod addresses, the pool kept warm enough
	// that no pod waits for an ENI.
	warm := slices.Max(lv) + 20
	n, err := newNode(nodeConfig{binDir: abs, refBin: *refBin, instanceType: "c5.18xlarge", warmIPs: warm, timeout: *timeout, out: out})
	if err != nil {
		fatal(err)
	}
	err = run(n, lv, *runs, *hangRuns, *timeout, *jsonOut)
	n.close()
	if err != nil {
		fatal(err)
	}
}

func parseLevels(s string) ([]int, error) {
	var lv []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 600 {
			return nil, fmt.Errorf("-pods %q: %q is not a pod count from 1 to 600", s, f)
		}
		lv = append(lv, v)
	}
	slices.Sort(lv)
	return slices.Compact(lv), nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "cnibench:", err)
	os.Exit(1)
}

func (n *node) plugins(timeout time.Duration) ([]*plugin, error) {
	vpc, err := libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni","plugins":[
		{"type":"vpc-cni","mtu":"9001","ipamdAddress":"unix://%s","ipamdTimeout":"%s","pluginLogFile":"%s","pluginLogLevel":"info","stateDir":%q}]}`,
		n.sock, timeout, n.logFile, filepath.Join(n.dir, "vpc-cni-state"))))
	if err != nil {
		return nil, err
	}
	// The reference as its own conflist sets it up (its log at its default
	// level, Debug, as shipped), ipamd at the path it insists on: the jail's.
	ref, err := libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"aws-cni-ref","plugins":[
		{"type":"aws-cni","name":"aws-cni","vethPrefix":"eni","mtu":"9001","podSGEnforcingMode":"strict",
		"pluginLogFile":"%s","pluginLogLevel":"DEBUG"}]}`, filepath.Join(n.dir, "aws-cni.log"))))
	if err != nil {
		return nil, err
	}
	// ptp + host-local as their README sets them up, without ipMasq
	// (neither AWS plugin makes a NAT rule), IPAM state in the bench's dir.
	ptp, err := libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ptpnet","plugins":[
		{"type":"ptp","ipMasq":false,"mtu":9001,"ipam":{"type":"host-local","subnet":"10.99.0.0/16",
		"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"%s"}}]}`, filepath.Join(n.dir, "host-local"))))
	if err != nil {
		return nil, err
	}
	byPod := func(name string) string { return ownership.HostVeth("eni", "default", name) }
	return []*plugin{
		{name: "vpc-cni", list: vpc, hostVeth: byPod, vethBy: vethByIpamd},
		{name: "reference", list: ref, hostVeth: byPod, vethBy: vethByNamespace},
		{name: "ptp+host-local", list: ptp, vethBy: vethByDEL},
	}, nil
}

func run(n *node, levels []int, runs, hangRuns int, timeout time.Duration, jsonOut string) error {
	pls, err := n.plugins(timeout)
	if err != nil {
		return err
	}
	rep := &report{Runs: runs, Machine: machine(), Setup: &n.setup}
	var background []*pod
	defer func() {
		for _, p := range background {
			n.del(pls[0], p)
			n.removeNetns(p)
		}
	}()
	// One warm-up cycle each (page cache, ipamd's first allocation), not counted.
	for _, pl := range pls {
		if _, err := n.cycle(pl, "warm-"+strings.SplitN(pl.name, "+", 2)[0]); err != nil {
			return err
		}
	}
	for _, level := range levels {
		for len(background) < level-1 {
			p, err := n.newPod(fmt.Sprintf("bg-%d", len(background)))
			if err != nil {
				return err
			}
			background = append(background, p)
			if _, _, err := n.add(pls[0], p); err != nil {
				return fmt.Errorf("background pod %s: %w (plugin log %s)", p.name, err, n.logFile)
			}
		}
		lr := levelResult{Pods: level, Plugins: map[string]*verbs{}}
		for _, pl := range pls {
			lr.Plugins[pl.name] = &verbs{}
		}
		for i := 0; i < runs; i++ {
			for k := range pls {
				pl := pls[(i+k)%len(pls)] // rotate who goes first
				s, err := n.cycle(pl, fmt.Sprintf("p%d-%d-%s", level, i, strings.SplitN(pl.name, "+", 2)[0]))
				if err != nil {
					return err
				}
				lr.Plugins[pl.name].add(s)
			}
		}
		rep.Levels = append(rep.Levels, lr)
		fmt.Fprintf(os.Stderr, "cnibench: %d pods on the node: %d runs per plugin done\n", level, runs)
	}
	rep.print(os.Stdout, pls)
	if err := hung(n, pls[0], hangRuns, timeout); err != nil {
		return err
	}
	if jsonOut != "" {
		if err := rep.writeJSON(jsonOut); err != nil {
			return err
		}
		fmt.Printf("\nfigures written to %s\n", jsonOut)
	}
	return nil
}
