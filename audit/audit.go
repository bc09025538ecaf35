// Package audit finds a node's leaked, missing, stray and double-held pod
// networking from what a real node offers, never from a harness's
// knowledge: the node namespace's kernel objects, ipamd's checkpoint
// (vpc-cni-ipam/1, the reference's or vpccni's) and, when the runtime can
// be asked, its live sandboxes. Which rules are a pod's is decided by
// the ownership package, the one the plugin's teardown obeys, so a rule
// another agent keeps at the same priorities is never called a pod's.
//
// This is the audit's core (the node's view and its findings); the
// command that reads a live node and prints them is built on it.
package audit

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// Class is what kind of wrong a finding is.
type Class string

const (
	// Leaked: a pod rule (512, 1536) of an address no allocation holds and
	// no pod veth is routed to.
	Leaked Class = "LEAKED"
	// Stray: a checkpoint allocation whose pod is gone: no pod veth is
	// routed its address (the address is held for ever).
	Stray Class = "STRAY ALLOCATION"
	// Double: an address routed to one pod veth while the checkpoint
	// gives it to another pod.
	Double Class = "DOUBLE"
	// Missing: an allocated, routed pod address that lacks its rule 512.
	Missing Class = "MISSING"
)

// Finding is one wrong thing, with its evidence and the command that
// shows it on the node.
type Finding struct {
	Class  Class  `json:"class"`
	Addr   string `json:"addr"`
	Object string `json:"object"`
	Reason string `json:"reason"`
	Show   string `json:"show"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s: %s (%s)", f.Class, f.Object, f.Reason, f.Show)
}

// Input is what the audit reads.
type Input struct {
	// Node is the node's network namespace.
	Node kernel.API
	// Allocations are the checkpoint's (nil: no checkpoint was found).
	Allocations []checkpoint.Allocation
	// VethPrefixes are the host veth prefixes pods' veths carry ("eni",
	// and the strict branch pods' "vlan").
	VethPrefixes []string
}

// podRoute is a host route of the main table to a pod veth.
type podRoute struct {
	addr netip.Addr
	veth string
}

// Run audits the node and returns its findings, sorted by address then
// class; none is a clean node. An error means the node could not be read.
func Run(in Input) ([]Finding, error) {
	node, err := ownership.ReadNode(in.Node)
	if err != nil {
		return nil, err
	}
	scope := ownership.Scope{Node: node}
	routed, err := podRoutes(in.Node, in.VethPrefixes)
	if err != nil {
		return nil, err
	}
	rules, err := in.Node.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, fmt.Errorf("list the node's rules: %w", err)
	}
	held := map[netip.Addr]checkpoint.Allocation{}
	for _, a := range in.Allocations {
		if ip, err := a.Addr(); err == nil {
			held[ip] = a
		}
	}

	var out []Finding
	toPod := map[netip.Addr]bool{}
	for _, r := range rules {
		sh, ok := scope.Owns(r)
		if !ok || sh.Kind == ownership.KindIIF {
			continue // another agent's rule, or a branch pod's (not judged yet)
		}
		if sh.Kind == ownership.KindToPod {
			toPod[sh.IP] = true
		}
		_, allocated := held[sh.IP]
		if _, live := routed[sh.IP]; allocated || live {
			continue
		}
		out = append(out, Finding{Class: Leaked, Addr: sh.IP.String(), Object: kernel.RuleString(r),
			Reason: "no allocation holds the address and no pod veth is routed to it",
			Show:   fmt.Sprintf("ip %srule show priority %d", v6flag(sh.IP), r.Priority)})
	}
	for ip, a := range held {
		pr, live := routed[ip]
		switch {
		case !live:
			out = append(out, Finding{Class: Stray, Addr: ip.String(), Object: "allocation " + describe(a),
				Reason: "no pod veth is routed the address: its pod is gone and the address is held for ever",
				Show:   "the checkpoint; ip " + v6flag(ip) + "route show " + ip.String()})
		case a.Metadata.K8SPodName != "" && !ownership.HasPodSuffix(pr.veth, a.Metadata.K8SPodNamespace, a.Metadata.K8SPodName):
			out = append(out, Finding{Class: Double, Addr: ip.String(), Object: "route " + ip.String() + " dev " + pr.veth,
				Reason: fmt.Sprintf("routed to %s, which is not %s/%s's veth, while the checkpoint gives the address to %s",
					pr.veth, a.Metadata.K8SPodNamespace, a.Metadata.K8SPodName, describe(a)),
				Show: "ip " + v6flag(ip) + "route show " + ip.String()})
		case !toPod[ip]:
			out = append(out, Finding{Class: Missing, Addr: ip.String(), Object: kernel.RuleString(ownership.ToPodRule(ip)),
				Reason: "the pod is live (its veth is routed the address) and allocated, but its rule 512 is gone",
				Show:   "ip " + v6flag(ip) + "rule show priority 512"})
		}
	}
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

// podRoutes are the main table's host routes to pod veths, by address.
func podRoutes(k kernel.API, prefixes []string) (map[netip.Addr]podRoute, error) {
	links, err := k.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list the node's links: %w", err)
	}
	veths := map[int]string{}
	for _, l := range links {
		if ownership.IsHostVeth(l.Name, prefixes) {
			veths[l.Index] = l.Name
		}
	}
	routes, err := k.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, fmt.Errorf("list the node's routes: %w", err)
	}
	out := map[netip.Addr]podRoute{}
	for _, r := range routes {
		name, ok := veths[r.LinkIndex]
		if !ok || r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits {
			continue
		}
		if ip, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ip = ip.Unmap()
			out[ip] = podRoute{addr: ip, veth: name}
		}
	}
	return out, nil
}

func describe(a checkpoint.Allocation) string {
	pod := "no pod recorded"
	if a.Metadata.K8SPodName != "" {
		pod = a.Metadata.K8SPodNamespace + "/" + a.Metadata.K8SPodName
	}
	return fmt.Sprintf("%s (%s)", shortID(a.ContainerID), pod)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func v6flag(a netip.Addr) string {
	if a.Is6() {
		return "-6 "
	}
	return ""
}
