//go:build legacydelete

package main

import (
	"fmt"

	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// deletePolicy names the harness's delete policy this build runs in
// place of vpccni's flow: set with -ldflags "-X main.deletePolicy=NAME".
// A build for the Kubernetes suite's check that its drain spec can fail
// (with ref-v1.11, the flow of the #2048 leak); never shipped.
var deletePolicy string

func deleteFlow() (func(*plugin.Plugin, *plugin.DelRequest) error, error) {
	p, err := policy.ByName(deletePolicy)
	if err != nil {
		return nil, fmt.Errorf("this legacydelete build: %w (set it with -ldflags -X main.deletePolicy=NAME)", err)
	}
	return p.Del, nil
}
