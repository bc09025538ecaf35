// Package benchstat is the arithmetic and the table of the side-by-side
// benchmarks (bench/cmd/cnibench through libcni, the e2e suite's bench
// spec through containerd): median, nearest-rank p95, and vpc-cni's ratio
// to ptp + host-local.
package benchstat

import (
	"fmt"
	"io"
	"slices"
	"time"
)

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// Median of d (0 for none).
func Median(d []time.Duration) time.Duration {
	s := sorted(d)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 1:
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// P95 is the nearest-rank 95th percentile (0 for none).
func P95(d []time.Duration) time.Duration {
	s := sorted(d)
	if len(s) == 0 {
		return 0
	}
	return s[(95*len(s)+99)/100-1]
}

// Max of d (0 for none).
func Max(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// Ratio is a/b, 0 when b is.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Ms prints a duration in milliseconds.
func Ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// Header writes the table's header; first names the first column.
func Header(w io.Writer, first string) {
	fmt.Fprintf(w, "%-6s %-22s %10s %10s\n", first, "plugin", "median", "p95")
}

// Compare writes one call's rows: vpc-cni, ptp + host-local, and the ratio.
func Compare(w io.Writer, call string, vpc, ptp []time.Duration) {
	ma, pa, mb, pb := Median(vpc), P95(vpc), Median(ptp), P95(ptp)
	fmt.Fprintf(w, "%-6s %-22s %10s %10s\n", call, "vpc-cni", Ms(ma), Ms(pa))
	fmt.Fprintf(w, "%-6s %-22s %10s %10s\n", call, "ptp+host-local", Ms(mb), Ms(pb))
	fmt.Fprintf(w, "%-6s %-22s %9.2fx %9.2fx\n", call, "ratio vpc-cni/ptp", Ratio(ma, mb), Ratio(pa, pb))
}
