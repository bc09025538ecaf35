package ipamd

import "github.com/vpccni/vpccni/internal/failpoint"

// Option is a setting of the scenario harness, the benchmarks and the
// tests, passed to New after the Config: the binary passes none. Config
// holds what an operator sets and the seams (kernel, cloud, clock).
type Option func(*options)

// options are the Options a Daemon was made with; the zero value is the
// binary's.
type options struct {
	placement   func(podNamespace, podName string) (device int, ok bool)
	manualLoops bool
	perCallSync bool
	limits      Limits
	failpoints  *failpoint.Set
}

// WithPlacement pins a pod to an ENI device: the scenario harness uses it
// to put pods on the devices a scenario names. A full or absent device
// falls back to the usual choice.
func WithPlacement(place func(podNamespace, podName string) (device int, ok bool)) Option {
	return func(o *options) { o.placement = place }
}

// WithManualLoops leaves the warm pool and the reconciler to Tick (the
// scenario harness drives them from its simulated clock) instead of
// background tickers.
func WithManualLoops() Option { return func(o *options) { o.manualLoops = true } }

// WithPerCallSync writes the checkpoint once per call instead of sharing
// one write among concurrent calls (benchmarks compare the two).
func WithPerCallSync(on bool) Option { return func(o *options) { o.perCallSync = on } }

// WithLimits bounds what one client can take of the server; zero fields
// are the defaults (DefaultLimits), which the binary runs with.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithFailpoints arms the harness's failpoints in this ipamd.
func WithFailpoints(s *failpoint.Set) Option { return func(o *options) { o.failpoints = s } }
