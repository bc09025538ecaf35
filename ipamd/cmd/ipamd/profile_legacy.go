//go:build legacydelete

package main

import (
	"fmt"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// deletePolicy names the harness's delete policy whose ipamd this build
// is: set with -ldflags "-X main.deletePolicy=NAME". With ref-v1.11, an
// ipamd as the reference's was then: it keeps no release queue, does not
// reconcile, and forgets the pods a lost checkpoint held (no adoption from
// the kernel). A build for the Kubernetes suite's check that its drain
// spec can fail; never shipped.
var deletePolicy string

func legacyProfile(cfg *ipamd.Config) error {
	p, err := policy.ByName(deletePolicy)
	if err != nil {
		return fmt.Errorf("this legacydelete build: %w (set it with -ldflags -X main.deletePolicy=NAME)", err)
	}
	prof := p.Ipamd()
	cfg.Reconcile = prof.Reconcile
	cfg.Restore = ipamd.RestorePolicy{AdoptOnMissing: prof.AdoptOnMissing, RecoverCorrupt: prof.RecoverCorrupt, PruneStale: prof.PruneStale}
	if !prof.DrainReleaseQueue {
		cfg.ReleaseQueue = ""
	}
	return nil
}
