package reconcile

import (
	"github.com/vpccni/vpccni/ownership"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpccni/vpccni/kernel"
)

// Recovered is a pod address read back from the kernel.
type Recovered struct {
	IP       netip.Addr
	HostVeth string // the link whose existence proves the pod lives
	// HostVethIndex is that link's ifindex: a DEL proves it is the pod's
	// sandbox by naming it (the peer of its container interface), and a
	// same-named veth made later is not this one.
	HostVethIndex int
	Table         int // from the address's 1536 rule; kernel.TableMain without one
}

// Rebuild reads the node namespace's pod addresses back from the kernel,
// for when ipamd's checkpoint is missing or corrupt: without it ipamd would
// hand live pods' addresses to new pods. A pod address is a main-table
// host route, <IP>/32 or /128 without a gateway, to a host veth (a veth
// named by one of vethPrefixes followed by the 11-hex pod hash), whose
// address is a pool address in an ENI subnet of the node (ownership.Scope).
// Its table is that of its own 1536 rule
// (Owns: exactly `from <IP>` in a pod table), main when there is none.
//
// Routes to other links (ENIs, a foreign /32 to a tunnel), routes via a
// gateway and addresses outside the pool are not pods'. Where one address
// has routes to two host veths, the one Linux uses (lowest metric, then
// name) is kept, so no address is recovered twice. The result is sorted by
// address.
func Rebuild(k kernel.API, isPodAddress func(netip.Addr) bool, vethPrefixes []string) ([]Recovered, error) {
	links, err := k.LinkList()
	if err != nil {
		return nil, err
	}
	node, err := ownership.ReadNode(k)
	if err != nil {
		return nil, err
	}
	scope := ownership.Scope{Node: node, InPool: isPodAddress}
	veths := map[int]string{}
	for _, l := range links {
		if l.Kind == kernel.KindVeth && ownership.IsHostVeth(l.Name, vethPrefixes) {
			veths[l.Index] = l.Name
		}
	}
	routes, err := k.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, err
	}
	type found struct {
		Recovered
		metric int
	}
	byIP := map[netip.Addr]found{}
	for _, r := range routes {
		ip, ok := routeHostAddr(r)
		veth, isVeth := veths[r.LinkIndex]
		if !ok || !isVeth {
			continue
		}
		if _, err := scope.PodTables(ip); err != nil {
			continue
		}
		f := found{Recovered{IP: ip, HostVeth: veth, HostVethIndex: r.LinkIndex, Table: kernel.TableMain}, r.Priority}
		if prev, seen := byIP[ip]; seen && (prev.metric < f.metric || (prev.metric == f.metric && prev.HostVeth < f.HostVeth)) {
			continue
		}
		byIP[ip] = f
	}
	rules, err := k.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	tabled := map[netip.Addr]bool{}
	for _, r := range rules {
		o, ok := Owns(r, scope)
		f, pod := byIP[o.IP]
		if !ok || o.Kind != KindRuleFromPod || !pod || tabled[o.IP] {
			continue
		}
		// The first in the kernel's order is the one traffic uses.
		f.Table, tabled[o.IP] = r.Table, true
		byIP[o.IP] = f
	}
	out := make([]Recovered, 0, len(byIP))
	for _, f := range byIP {
		out = append(out, f.Recovered)
	}
	slices.SortFunc(out, func(a, b Recovered) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return strings.Compare(a.HostVeth, b.HostVeth)
	})
	return out, nil
}
