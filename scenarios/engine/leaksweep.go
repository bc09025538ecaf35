package engine

import (
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// leakSweep is ipamd's sweep for leaked ENIs as the policy's era runs it.
func (r *run) leakSweep(p policy.LeakSweep) ipamd.LeakSweep {
	sw := ipamd.LeakSweep{Interval: p.Interval, MinAge: p.MinAge}
	if p.MaxDelay > 0 {
		if r.sweepRand == nil {
			h := fnv.New64a()
			h.Write([]byte(r.cloud.InstanceID()))
			r.sweepRand = rand.New(rand.NewPCG(h.Sum64(), 0x7377656570))
		}
		sw.Delay = func() time.Duration { // (whole seconds, as the reference draws them)
			return time.Duration(r.sweepRand.Int64N(int64(p.MaxDelay/time.Second))) * time.Second
		}
	}
	return sw
}
