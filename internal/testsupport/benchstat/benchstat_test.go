package benchstat

import (
	"strings"
	"testing"
	"time"
)

func ds(ms ...int) []time.Duration {
	var out []time.Duration
	for _, m := range ms {
		out = append(out, time.Duration(m)*time.Millisecond)
	}
	return out
}

func TestStats(t *testing.T) {
	for _, c := range []struct {
		in          []time.Duration
		med, p, max time.Duration
	}{
		{nil, 0, 0, 0},
		{ds(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{ds(3, 1, 2), 2 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond},
		{ds(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond, 4 * time.Millisecond},
		// 20 values: rank ceil(0.95*20) = 19.
		{ds(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 10500 * time.Microsecond, 19 * time.Millisecond, 20 * time.Millisecond},
	} {
		if m, p, x := Median(c.in), P95(c.in), Max(c.in); m != c.med || p != c.p || x != c.max {
			t.Errorf("%v: median %v p95 %v max %v, want %v %v %v", c.in, m, p, x, c.med, c.p, c.max)
		}
	}
	if Ratio(time.Second, 0) != 0 || Ratio(3*time.Second, 2*time.Second) != 1.5 {
		t.Error("Ratio")
	}
}

func TestCompare(t *testing.T) {
	var b strings.Builder
	Compare(&b, "ADD", ds(10, 12, 14), ds(20, 20, 20))
	want := "ADD    vpc-cni                   12.0 ms    14.0 ms\n" +
		"ADD    ptp+host-local            20.0 ms    20.0 ms\n" +
		"ADD    ratio vpc-cni/ptp           0.60x      0.70x\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
