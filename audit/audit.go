// Package audit finds a node's leaked, missing, stray, double-held and
// misrouted pod networking from what a real node offers, never from a
// harness's knowledge: the node namespace's kernel objects, ipamd's
// checkpoint (vpc-cni-ipam/1, the reference's or vpccni's), and, when they
// can be asked, the runtime's live sandboxes (CRI) and ipamd's memory (its
// introspection). Which rules are a pod's is decided by the ownership
// package, the one the plugin's teardown obeys, so a rule another agent
// keeps at the same priorities is never called a pod's; --fix removes
// through the teardown's own remover (ownership.DeleteRules).
package audit

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
)

// Class is what kind of wrong a finding is.
type Class string

const (
	// Leaked: a pod object (rule 512, 1536 or 10, host route, veth, VLAN
	// link) of an address no allocation holds and no live sandbox has.
	Leaked Class = "LEAKED"
	// Stray: an allocation whose pod is gone (the address is held for
	// ever).
	Stray Class = "STRAY ALLOCATION"
	// Double: an address given to two pods: routed to one pod's veth while
	// allocated to another, or held by different pods in the checkpoint
	// and in ipamd's memory.
	Double Class = "DOUBLE"
	// Missing: a live pod's object or allocation that is not there.
	Missing Class = "MISSING"
	// Misroute: the kernel's own route lookup sends a live pod's traffic
	// the wrong way (out of another ENI, or to another veth).
	Misroute Class = "MISROUTE"
)

// Finding is one wrong thing, with its evidence and the command that
// shows it on the node.
type Finding struct {
	Class  Class  `json:"class"`
	Addr   string `json:"addr,omitempty"`
	Object string `json:"object"`
	Reason string `json:"reason"`
	Show   string `json:"show"`
	// Fixable: --fix may remove the object (a LEAKED one the ownership
	// rules prove is a pod's, and nothing else).
	Fixable bool `json:"fixable"`
	remove  removal
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s: %s (%s)", f.Class, f.Object, f.Reason, f.Show)
}

// key identifies a finding across two audits of the same node.
func (f Finding) key() string { return string(f.Class) + "|" + f.Object }

// Input is what the audit reads.
type Input struct {
	// Node is the node's network namespace.
	Node kernel.API
	// Allocations are the checkpoint's (nil: no checkpoint was read).
	Allocations []checkpoint.Allocation
	// VethPrefixes are the host veth prefixes of pods' veths ("eni"); the
	// strict branch pods' "vlan" is always added.
	VethPrefixes []string
	// Sandboxes are the runtime's (CRI ListPodSandbox); nil: the runtime
	// was not asked, and whether a pod lives is read from its veth alone.
	Sandboxes []Sandbox
	// Ipamd is ipamd's memory (its introspection); nil: not asked.
	Ipamd *IpamdView
	// Probes are destinations off the node whose route from each live pod
	// must leave through the pod's ENI; nil: DefaultProbes.
	Probes []netip.Addr
}

// Sandbox is one pod sandbox as the runtime lists it.
type Sandbox struct {
	ID, Namespace, Name string
	Ready               bool
}

// IpamdView is what ipamd's memory says.
type IpamdView struct {
	// Held are the addresses pods hold now.
	Held map[netip.Addr]Holder
	// InPool says whether an address is one ipamd hands to pods. It does
	// not narrow which rules are pods' (the node's word does, as for the
	// teardown): a leaked rule of an address outside it says so.
	InPool func(netip.Addr) bool
	// Conflicts describe addresses ipamd lists as held twice.
	Conflicts []string
}

// Holder is who holds an address, by the checkpoint or by ipamd.
type Holder struct {
	ContainerID, PodNamespace, PodName string
	// Table is the pod's ENI's table (0: not known).
	Table int
}

// DefaultProbes are documentation addresses (RFC 5737, RFC 3849): off
// every VPC, so a lookup for them shows where a pod's egress goes.
var DefaultProbes = []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:ffff::7")}

// Run audits the node and returns its findings, sorted by address, class
// and object; none is a clean node. An error means the node could not be
// read.
func Run(in Input) ([]Finding, error) {
	v, err := readNode(in)
	if err != nil {
		return nil, err
	}
	a := &auditor{in: in, v: v, holders: holdersOf(in)}
	a.judgeRules()
	a.judgeLinks()
	a.judgeHolders()
	if err := a.judgeRouting(); err != nil {
		return nil, err
	}
	out := a.out
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Addr != out[j].Addr {
			return out[i].Addr < out[j].Addr
		}
		if out[i].Class != out[j].Class {
			return out[i].Class < out[j].Class
		}
		return out[i].Object < out[j].Object
	})
	return out, nil
}

// Stable is the fixable findings of second that first found too: --fix
// removes only what two audits a while apart agree on, so an object an
// ADD is building (a veth before its route, a rule before its allocation
// is written) is never taken for a leak.
func Stable(first, second []Finding) []Finding {
	seen := map[string]bool{}
	for _, f := range first {
		seen[f.key()] = true
	}
	var out []Finding
	for _, f := range second {
		if f.Fixable && seen[f.key()] {
			out = append(out, f)
		}
	}
	return out
}

// Counts is the number of findings of each class.
func Counts(fs []Finding) map[Class]int {
	out := map[Class]int{}
	for _, f := range fs {
		out[f.Class]++
	}
	return out
}

func v6flag(a netip.Addr) string {
	if a.Is6() {
		return "-6 "
	}
	return ""
}
