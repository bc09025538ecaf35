package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/benchstat"
)

// setupTimes is what the bench spends outside the timed region, once.
type setupTimes struct {
	node, jail time.Duration
}

// verbs holds one plugin's samples at one level.
type verbs struct {
	addWall, addCPU, delWall, delCPU []time.Duration
	// outside the timed region: pod namespace + jail bind, the jail's
	// hand-off around each call, the veth pair's removal after the DEL
	// (by ipamd, or with the namespace), the namespace's removal
	netns, handoff, veth, remove []time.Duration
}

func (v *verbs) add(s sample) {
	v.addWall, v.addCPU = append(v.addWall, s.add.wall), append(v.addCPU, s.add.cpu)
	v.delWall, v.delCPU = append(v.delWall, s.del.wall), append(v.delCPU, s.del.cpu)
	v.netns, v.remove, v.veth = append(v.netns, s.netns), append(v.remove, s.remove), append(v.veth, s.veth)
	v.handoff = append(v.handoff, s.add.whole-s.add.wall, s.del.whole-s.del.wall)
}

type levelResult struct {
	Pods    int
	Plugins map[string]*verbs
}

type report struct {
	Runs    int
	Machine string
	Setup   *setupTimes
	Levels  []levelResult
}

func machine() string {
	k, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%s/%s, %d CPUs, Linux %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.TrimSpace(string(k)), runtime.Version())
}

const refName = "reference"

func (r *report) print(w io.Writer, pls []*plugin) {
	fmt.Fprintf(w, "\nCNI ADD/DEL through libcni in a node namespace, %d runs per plugin and level, interleaved (the order rotating)\n", r.Runs)
	fmt.Fprintf(w, "vpc-cni and the reference (aws-cni) against one ipamd --cloud memory (c5.18xlarge, cooldown 0); "+
		"ptp + host-local (containernetworking/plugins of go.mod), ipMasq false\n")
	fmt.Fprintf(w, "timed: the plugin process alone, fork to wait; cpu: its user+sys time (ipamd's is not in it)\n%s\n", r.Machine)
	for _, lr := range r.Levels {
		if len(r.Levels) > 2 && lr.Pods != 1 && lr.Pods != 110 {
			continue // in the curve only
		}
		fmt.Fprintf(w, "\n%d pod(s) on the node\n", lr.Pods)
		fmt.Fprintf(w, "%-5s %-16s %9s %9s %9s %14s %8s\n", "verb", "plugin", "median", "p95", "cpu", "vs reference", "vs ptp")
		for _, verb := range []string{"ADD", "DEL"} {
			ref, ptp := lr.median(refName, verb), lr.median("ptp+host-local", verb)
			for _, pl := range pls {
				v := lr.Plugins[pl.name]
				wall, cpu := v.addWall, v.addCPU
				if verb == "DEL" {
					wall, cpu = v.delWall, v.delCPU
				}
				m := benchstat.Median(wall)
				fmt.Fprintf(w, "%-5s %-16s %9s %9s %9s %13.2fx %7.2fx\n", verb, pl.name, benchstat.Ms(m), benchstat.Ms(benchstat.P95(wall)),
					benchstat.Ms(benchstat.Median(cpu)), benchstat.Ratio(m, ref), benchstat.Ratio(m, ptp))
			}
		}
	}
	fmt.Fprintf(w, "\ncost curve: median ms per call against pods on the node\n%5s", "pods")
	for _, verb := range []string{"ADD", "DEL"} {
		for _, pl := range pls {
			fmt.Fprintf(w, " %16s", verb+" "+pl.name)
		}
	}
	fmt.Fprintf(w, " %11s %11s\n", "ADD vpc/ref", "DEL vpc/ref")
	for _, lr := range r.Levels {
		fmt.Fprintf(w, "%5d", lr.Pods)
		for _, verb := range []string{"ADD", "DEL"} {
			for _, pl := range pls {
				fmt.Fprintf(w, " %16.1f", ms(lr.median(pl.name, verb)))
			}
		}
		fmt.Fprintf(w, " %10.2fx %10.2fx\n", lr.ratio("ADD"), lr.ratio("DEL"))
	}
	if len(r.Levels) > 1 {
		first, last := r.Levels[0], r.Levels[len(r.Levels)-1]
		fmt.Fprintf(w, "DEL cost at %d pods / at %d:", last.Pods, first.Pods)
		for _, pl := range pls {
			fmt.Fprintf(w, " %s %.2fx", pl.name, benchstat.Ratio(last.median(pl.name, "DEL"), first.median(pl.name, "DEL")))
		}
		fmt.Fprintln(w)
	}
	r.printSetup(w, pls)
}

func (r *report) printSetup(w io.Writer, pls []*plugin) {
	fmt.Fprintf(w, "\nset-up outside the timed region: node namespace and ipamd %s, jail %s (once);", benchstat.Ms(r.Setup.node), benchstat.Ms(r.Setup.jail))
	fmt.Fprintf(w, " per run, medians over every level:\n")
	for _, pl := range pls {
		var netns, handoff, veth, remove []time.Duration
		for _, lr := range r.Levels {
			v := lr.Plugins[pl.name]
			netns, handoff = append(netns, v.netns...), append(handoff, v.handoff...)
			veth, remove = append(veth, v.veth...), append(remove, v.remove...)
		}
		fmt.Fprintf(w, "  %-16s pod namespace + jail bind %s, jail hand-off per call %s, namespace removal %s\n", pl.name,
			benchstat.Ms(benchstat.Median(netns)), benchstat.Ms(benchstat.Median(handoff)), benchstat.Ms(benchstat.Median(remove)))
		if pl.vethBy != vethByDEL {
			fmt.Fprintf(w, "  %-16s veth pair deleted by %s: %s after the DEL returned (median), %s p95\n", "",
				pl.vethBy, benchstat.Ms(benchstat.Median(veth)), benchstat.Ms(benchstat.P95(veth)))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (lr levelResult) median(plugin, verb string) time.Duration {
	v := lr.Plugins[plugin]
	if v == nil {
		return 0
	}
	if verb == "DEL" {
		return benchstat.Median(v.delWall)
	}
	return benchstat.Median(v.addWall)
}

func (lr levelResult) ratio(verb string) float64 {
	return benchstat.Ratio(lr.median("vpc-cni", verb), lr.median(refName, verb))
}

// The JSON form: milliseconds, one object per level and plugin.
type jsonStat struct {
	MedianMs float64 `json:"medianMs"`
	P95Ms    float64 `json:"p95Ms"`
	CPUMs    float64 `json:"cpuMedianMs"`
}

type jsonPlugin struct {
	Add jsonStat `json:"add"`
	Del jsonStat `json:"del"`
}

type jsonLevel struct {
	Pods           int                   `json:"pods"`
	Plugins        map[string]jsonPlugin `json:"plugins"`
	AddVsReference float64               `json:"addVsReference"`
	DelVsReference float64               `json:"delVsReference"`
}

func stat(wall, cpu []time.Duration) jsonStat {
	return jsonStat{MedianMs: ms(benchstat.Median(wall)), P95Ms: ms(benchstat.P95(wall)), CPUMs: ms(benchstat.Median(cpu))}
}

func (r *report) writeJSON(path string) error {
	out := struct {
		Machine string      `json:"machine"`
		Runs    int         `json:"runs"`
		Timed   string      `json:"timed"`
		Levels  []jsonLevel `json:"levels"`
	}{Machine: r.Machine, Runs: r.Runs, Timed: "the plugin process alone, fork to wait"}
	for _, lr := range r.Levels {
		jl := jsonLevel{Pods: lr.Pods, Plugins: map[string]jsonPlugin{}, AddVsReference: lr.ratio("ADD"), DelVsReference: lr.ratio("DEL")}
		for name, v := range lr.Plugins {
			jl.Plugins[name] = jsonPlugin{Add: stat(v.addWall, v.addCPU), Del: stat(v.delWall, v.delCPU)}
		}
		out.Levels = append(out.Levels, jl)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
