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
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/plugin"
)

// Policy is one DEL behaviour.
type Policy interface {
	Name() string
	// Describe says in a line what the flow does, for --help and reports.
	Describe() string
	Del(p *plugin.Plugin, r *plugin.DelRequest) error
	// Ipamd is the daemon the flow ran beside.
	Ipamd() Ipamd
}

// Ipamd is what the daemon of a policy's era does beyond serving calls.
// The harness runs vpccni's ipamd with these switches, so a legacy flow is
// judged with the daemon it had: the reference has no reconciler and
// starts blind without its checkpoint.
type Ipamd struct {
	// Reconcile: release allocations of pods that are gone and remove
	// orphan rules (vpccni only).
	Reconcile bool
	// AdoptOnMissing: without a checkpoint, adopt the addresses the kernel
	// shows pods using (vpccni only).
	AdoptOnMissing bool
	// RecoverCorrupt: rebuild from the kernel instead of refusing to start
	// on a corrupt checkpoint (vpccni with --recover-from-kernel).
	RecoverCorrupt bool
	// PruneStale: on restore, drop allocations whose pod has no veth and
	// delete their rules at once (the reference since v1.13).
	PruneStale bool
	// DrainReleaseQueue: before serving, release what DELs that could not
	// reach ipamd queued (vpccni only).
	DrainReleaseQueue bool
	// LeakSweep: how ipamd deletes ENIs leaked in EC2 (ipamd.LeakSweep).
	LeakSweep LeakSweep
}

// LeakSweep is an era's search for leaked ENIs: every Interval, after a
// random delay of up to MaxDelay, it deletes the available ENIs its CNI
// created that are older than MinAge.
type LeakSweep struct{ Interval, MinAge, MaxDelay time.Duration }

// refLeakSweep is the reference's, in every era here: once an hour, each
// time after a random wait of up to 5 minutes, sparing ENIs younger than
// 5 minutes (docs/reference-facts.md#leaked-enis).
var refLeakSweep = LeakSweep{Interval: time.Hour, MinAge: 5 * time.Minute, MaxDelay: 5 * time.Minute}

// Default is vpccni's flow (plugin.Delete).
type Default struct{}

func (Default) Name() string { return "default" }
func (Default) Describe() string {
	return "vpccni: tear down from prevResult first, then release with a deadline; no ipamd outcome stops the teardown"
}
func (Default) Del(p *plugin.Plugin, r *plugin.DelRequest) error { return p.Delete(r) }

// Ipamd of vpccni: every recovery on, as deploy/ runs it.
func (Default) Ipamd() Ipamd {
	return Ipamd{Reconcile: true, AdoptOnMissing: true, RecoverCorrupt: true, DrainReleaseQueue: true,
		LeakSweep: LeakSweep{Interval: ipamd.DefaultLeakSweep.Interval, MinAge: ipamd.DefaultLeakSweep.MinAge}}
}

// The reference's DEL flows differ in two decisions only, so they are one
// flow with two settings (docs/reference-facts.md#the-reference-del,
// docs/reference-facts.md#history-of-the-leaks):
//
//	ref-v1.10    ipamd first for every pod; ipamd unreachable or failing:
//	             error, no teardown (kubelet is trusted to retry)
//	ref-v1.11    branch pods torn down from prevResult (PR #1705); others
//	             as v1.10 — the #2048 leak
//	ref-v1.12.1  ipamd unreachable or failing: teardown from prevResult,
//	             the error still returned (PR #2145)
//	ref-current  the same, returning success (PR #2350)
//
// In all of them "unknown pod" is success with no teardown, and a reply is
// torn down from after ipamd has already released the address.
type reference struct {
	name, describe string
	// branchFromPrevResult: tryDelWithPrevResult for branch-ENI pods.
	branchFromPrevResult bool
	// onIpamdFailure: what an unreachable or failing ipamd leads to.
	onIpamdFailure ipamdFailure
	ipamd          Ipamd
}

type ipamdFailure int

const (
	failNoTeardown      ipamdFailure = iota // return the error, touch nothing
	failTeardownError                       // tear down from prevResult, return the error
	failTeardownSuccess                     // tear down from prevResult, succeed
)

var (
	RefV110 = reference{"ref-v1.10", "reference v1.10: release first, tear down from ipamd's reply only; unreachable -> error; unknown pod -> success, no teardown",
		false, failNoTeardown, Ipamd{LeakSweep: refLeakSweep}}
	RefV111 = reference{"ref-v1.11", "reference v1.11: branch pods from prevResult; others as ref-v1.10 (the #2048 leak)",
		true, failNoTeardown, Ipamd{LeakSweep: refLeakSweep}}
	RefV1121 = reference{"ref-v1.12.1", "reference v1.12.1: ipamd unreachable -> teardown from prevResult and return the error; unknown pod -> success, no teardown",
		true, failTeardownError, Ipamd{LeakSweep: refLeakSweep}}
	RefCurrent = reference{"ref-current", "reference today: ipamd unreachable -> teardown from prevResult, success; unknown pod -> success, no teardown; release before teardown",
		true, failTeardownSuccess, Ipamd{PruneStale: true, LeakSweep: refLeakSweep}}
)

func (f reference) Name() string     { return f.name }
func (f reference) Describe() string { return f.describe }
func (f reference) Ipamd() Ipamd     { return f.ipamd }

func (f reference) Del(p *plugin.Plugin, r *plugin.DelRequest) error {
	if r.StateErr != nil {
		return r.StateErr // the reference fails a DEL whose prevResult it cannot parse
	}
	if f.branchFromPrevResult && r.State != nil && r.State.VlanID != 0 {
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
	default:
		if f.onIpamdFailure != failNoTeardown && r.State != nil {
			// teardownPodNetworkWithPrevResult: its result is only logged.
			if _, terr := p.Driver().Teardown(r.Host, r.Pod, r.State.Pod); terr != nil {
				r.Log().Warn("legacy: teardown with prevResult failed", "error", terr)
			}
		}
		if f.onIpamdFailure == failTeardownSuccess {
			return nil
		}
		return types.NewError(types.ErrTryAgainLater, "del cmd: error received from DelNetwork gRPC call", err.Error())
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
var All = []Policy{Default{}, RefV110, RefV111, RefV1121, RefCurrent}

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
