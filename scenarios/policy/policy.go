// Package policy holds the delete policies the harness runs a scenario
// under: vpccni's own flow and the reference's earlier flows, written on
// the same driver and the same parsed request so that they differ only in
// their decisions. The legacy policies exist to prove that the invariants
// catch the leaks those flows had; they never ship in the plugin binary.
package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/plugin"
)

// Policy is one DEL behaviour.
type Policy interface {
	Name() string
	// Describe says in a line what the flow does, for --help and reports.
	Describe() string
	Del(p *plugin.Plugin, r *plugin.DelRequest) error
}

// Default is vpccni's flow (plugin.Delete).
type Default struct{}

func (Default) Name() string { return "default" }
func (Default) Describe() string {
	return "vpccni: tear down from prevResult first, then release with a deadline; no ipamd outcome stops the teardown"
}
func (Default) Del(p *plugin.Plugin, r *plugin.DelRequest) error { return p.Delete(r) }

// RefV111 is the reference before the fix of #2048 (v1.11.x, REFERENCE.md
// §5.1): ipamd is asked first; unreachable or failing ipamd makes DEL fail
// with no teardown (kubelet is trusted to retry), "unknown pod" is success
// with no teardown, and a reply is torn down from. prevResult is not used
// for regular pods.
type RefV111 struct{}

func (RefV111) Name() string { return "ref-v1.11" }
func (RefV111) Describe() string {
	return "reference v1.11: release first; ipamd unreachable -> error, no teardown; unknown pod -> success, no teardown"
}

func (RefV111) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	reply, out, err := p.Release(r)
	switch out {
	case plugin.OutcomeOK:
	case plugin.OutcomeUnknownPod:
		r.Log().Info("ref-v1.11: container not found in ipamd, nothing to do")
		return nil
	default:
		return types.NewError(types.ErrTryAgainLater, "del cmd: error received from DelNetwork gRPC call", err.Error())
	}
	pod, err := p.PodFromDelReply(r, reply)
	if err != nil || pod == nil {
		return err
	}
	if _, err := p.Driver().Teardown(r.Host, r.Pod, *pod); err != nil {
		return types.NewError(types.ErrTryAgainLater, "del cmd: failed on tear down pod network", err.Error())
	}
	return nil
}

// All lists every policy, vpccni's first.
var All = []Policy{Default{}, RefV111{}}

// ByName finds a policy.
func ByName(name string) (Policy, error) {
	for _, p := range All {
		if p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("unknown delete policy %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the policy names, sorted.
func Names() []string {
	var n []string
	for _, p := range All {
		n = append(n, p.Name())
	}
	sort.Strings(n)
	return n
}
