package ipamd

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/warmpool"
)

// sweepRecorder is a cloud that records when ipamd sweeps it.
type sweepRecorder struct {
	cloud.Provider
	now    func() time.Time
	at     []time.Time
	minAge time.Duration
}

func (s *sweepRecorder) DeleteLeakedENIs(_ context.Context, minAge time.Duration) ([]string, error) {
	s.at = append(s.at, s.now())
	s.minAge = minAge
	return nil, nil
}

// The sweep runs at start (after its drawn delay) and then every
// interval after the last (plus a delay again), on the daemon's clock,
// and LoopsDue names it, so a harness that skips idle ticks still runs it.
func TestLeakSweepRunsAtStartThenEveryInterval(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	c, err := memory.New("m5.large")
	if err != nil {
		t.Fatal(err)
	}
	rec := &sweepRecorder{Provider: c.Provider(), now: func() time.Time { return now }}
	cfg := Config{Cloud: rec, Now: rec.now,
		LeakSweep: LeakSweep{Interval: 5 * time.Minute, MinAge: 7 * time.Minute, Delay: func() time.Duration { return 20 * time.Second }}}
	d := start(t, sockPath(t), cfg, WithManualLoops())
	tick := func(at time.Duration) {
		t.Helper()
		now = t0.Add(at)
		if _, err := d.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if due := d.LoopsDue(); due.IsZero() || due.After(t0.Add(20*time.Second)) {
		t.Fatalf("LoopsDue %v after start, want at the latest the first sweep at %v", due, t0.Add(20*time.Second))
	}
	tick(10 * time.Second)
	tick(20 * time.Second) // the first sweep
	tick(5 * time.Minute)
	tick(5*time.Minute + 39*time.Second)
	tick(5*time.Minute + 40*time.Second) // 20s + 5m + 20s
	want := []time.Time{t0.Add(20 * time.Second), t0.Add(5*time.Minute + 40*time.Second)}
	if len(rec.at) != len(want) || !rec.at[0].Equal(want[0]) || !rec.at[1].Equal(want[1]) {
		t.Fatalf("swept at %v, want %v", rec.at, want)
	}
	if rec.minAge != 7*time.Minute {
		t.Fatalf("swept sparing ENIs younger than %s, want the configured 7m", rec.minAge)
	}
	if next := d.sweep.due(); !next.Equal(t0.Add(11 * time.Minute)) {
		t.Fatalf("next sweep at %v, want %v", next, t0.Add(11*time.Minute))
	}
	if due := d.LoopsDue(); due.IsZero() || due.After(t0.Add(11*time.Minute)) {
		t.Fatalf("LoopsDue %v, after the next sweep at %v", due, t0.Add(11*time.Minute))
	}
}

// Without an interval there is no sweep, and a minimum age below a minute
// is refused (an ENI that young may be another node's, being attached).
func TestLeakSweepOffAndRanges(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := memory.New("m5.large")
	if err != nil {
		t.Fatal(err)
	}
	rec := &sweepRecorder{Provider: c.Provider(), now: func() time.Time { return now }}
	d := start(t, sockPath(t), Config{Cloud: rec, Now: rec.now}, WithManualLoops())
	for range 3 {
		now = now.Add(time.Hour)
		if _, err := d.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.at) != 0 {
		t.Fatalf("swept at %v with no sweep configured", rec.at)
	}
	for _, sw := range []LeakSweep{{Interval: 5 * time.Minute}, {Interval: 5 * time.Minute, MinAge: time.Second}, {Interval: time.Second, MinAge: 5 * time.Minute}} {
		if err := checkTiming(Config{LeakSweep: sw}); err == nil {
			t.Errorf("%+v accepted", sw)
		}
	}
}

// ipamd that dies at one of the cloud's points in the middle of
// attaching an ENI is dead: it runs nothing after (the harness restarts
// it), and what it left in EC2 is the sweep's.
func TestDiesAtACloudFailpoint(t *testing.T) {
	fp := &failpoint.Set{}
	if err := fp.Arm(cloud.FailAllocBeforeAttach, failpoint.Crash, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	c, err := memory.NewWithOptions("m5.large", memory.Options{Bare: true, Provider: cloud.ProviderOptions{Failpoints: fp, Now: clock}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SocketPath: sockPath(t), Cloud: c.Provider(), Now: clock, Targets: warmpool.Targets{WarmIP: 15}}
	d, err := New(cfg, WithManualLoops())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	for i := 0; i < 20 && d.Serving(); i++ {
		now = now.Add(5 * time.Second)
		d.Tick(context.Background())
	}
	if d.Serving() {
		t.Fatalf("ipamd still serving after the warm pool crashed at %s (hits %v)", cloud.FailAllocBeforeAttach, fp.Hits())
	}
	if fp.Hits()[cloud.FailAllocBeforeAttach] != 1 {
		t.Fatalf("hits %v, want the point reached once", fp.Hits())
	}
	out, err := c.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("status"), Values: []string{"available"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out.NetworkInterfaces); n != 1 {
		t.Fatalf("%d ENIs left available, want the one created before the crash", n)
	}
}
