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

// RefV1121 is the fix of #2048 as first merged (PR #2145, v1.12.1): when
// ipamd cannot be reached or fails, tear the pod down from prevResult but
// still return the error so kubelet retries; "unknown pod" is success with
// no teardown; branch pods as in RefV111.
type RefV1121 struct{}

func (RefV1121) Name() string { return "ref-v1.12.1" }
func (RefV1121) Describe() string {
	return "reference v1.12.1: ipamd unreachable -> teardown from prevResult and return the error; unknown pod -> success, no teardown"
}

func (RefV1121) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	return refFlow(p, r, true)
}

// RefCurrent is the reference today (v1.13+, REFERENCE.md §1.5): as
// RefV1121, but success after the prevResult teardown (PR #2350); a
// teardown failure after ipamd released the address is returned, and the
// retry then meets "unknown pod".
type RefCurrent struct{}

func (RefCurrent) Name() string { return "ref-current" }
func (RefCurrent) Describe() string {
	return "reference today: ipamd unreachable -> teardown from prevResult, success; unknown pod -> success, no teardown; release before teardown"
}

func (RefCurrent) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	return refFlow(p, r, false)
}

// refFlow is the reference's DEL since v1.12.1; returnIpamdErr selects
// v1.12.1's "return the error" over today's "succeed".
func refFlow(p *plugin.Plugin, r *plugin.DelRequest, returnIpamdErr bool) error {
	if r.State != nil && r.State.VlanID != 0 { // tryDelWithPrevResult
		if _, err := p.Driver().Teardown(r.Host, r.Pod, r.State.Pod); err != nil {
			return types.NewError(types.ErrTryAgainLater, "del cmd: failed to delete with prevResult", err.Error())
		}
		return nil
	}
	reply, out, err := p.Release(r)
	switch out {
	case plugin.OutcomeOK:
	case plugin.OutcomeUnknownPod:
		r.Log().Info("legacy: container not found in ipamd, nothing to do")
		return nil
	case plugin.OutcomeRefused:
		return types.NewError(types.ErrTryAgainLater, "del cmd: failed to process delete request", "")
	default: // teardownPodNetworkWithPrevResult, its result only logged
		if r.State != nil {
			if _, terr := p.Driver().Teardown(r.Host, r.Pod, r.State.Pod); terr != nil {
				r.Log().Warn("legacy: teardown with prevResult failed", "error", terr)
			}
		}
		if returnIpamdErr {
			return types.NewError(types.ErrTryAgainLater, "del cmd: error received from DelNetwork gRPC call", err.Error())
		}
		return nil
	}
	pod, err := p.PodFromDelReply(r, reply)
	if err != nil || pod == nil {
		return err // "did not have a valid IP"
	}
	if _, err := p.Driver().Teardown(r.Host, r.Pod, *pod); err != nil {
		return types.NewError(types.ErrTryAgainLater, "del cmd: failed on tear down pod network", err.Error())
	}
	return nil
}

// All lists every policy, vpccni's first.
var All = []Policy{Default{}, RefV110{}, RefV111{}, RefV1121{}, RefCurrent{}}

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
