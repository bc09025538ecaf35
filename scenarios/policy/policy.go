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

// RefV110 is the reference before PR #1705 (v1.10.2) put the VLAN in the
// result: every pod, branch-ENI pods included, is torn down only from
// ipamd's reply. ipamd unreachable or failing makes DEL fail with no
// teardown (kubelet is trusted to retry); "unknown pod" is success with no
// teardown.
type RefV110 struct{}

func (RefV110) Name() string { return "ref-v1.10" }
func (RefV110) Describe() string {
	return "reference v1.10: release first, tear down from ipamd's reply only; unreachable -> error; unknown pod -> success, no teardown"
}

func (RefV110) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	reply, out, err := p.Release(r)
	switch out {
	case plugin.OutcomeOK:
	case plugin.OutcomeUnknownPod:
		r.Log().Info("legacy: container not found in ipamd, nothing to do")
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

// RefV111 is the reference before the fix of #2048 (v1.11.x, REFERENCE.md
// §5.1): a branch-ENI pod whose prevResult carries its VLAN is torn down
// from it without ipamd (tryDelWithPrevResult); every other pod as in
// RefV110.
type RefV111 struct{}

func (RefV111) Name() string { return "ref-v1.11" }
func (RefV111) Describe() string {
	return "reference v1.11: branch pods from prevResult; others as ref-v1.10 (the #2048 leak)"
}

func (RefV111) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	if r.State != nil && r.State.VlanID != 0 {
		if _, err := p.Driver().Teardown(r.Host, r.Pod, r.State.Pod); err != nil {
			return types.NewError(types.ErrTryAgainLater, "del cmd: failed to delete with prevResult", err.Error())
		}
		return nil
	}
	return RefV110{}.Del(p, r)
}

// All lists every policy, vpccni's first.
var All = []Policy{Default{}, RefV110{}, RefV111{}}

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
