package ownership

import (
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// The pod rules, exactly as the pod path makes them. A rule at one of
// these priorities with any other shape (a wider prefix, an extra src,
// iif, oif or fwmark, the local or default table) belongs to someone
// else: an operator, another CNI, a network-policy agent.

// ToPodRule is `to <a> lookup main` at 512: traffic to the pod is routed by
// the main table (its host route), whatever ENI it came in on.
func ToPodRule(a netip.Addr) kernel.Rule {
	return kernel.Rule{Priority: PrioToPod, Family: Family(a), Dst: IPNet(HostPrefix(a)), Table: kernel.TableMain}
}

// FromPodRule is `from <a> lookup <table>` at 1536: the pod's egress uses
// its ENI's (or its VLAN's) table.
func FromPodRule(a netip.Addr, table int) kernel.Rule {
	return kernel.Rule{Priority: PrioFromPod, Family: Family(a), Src: IPNet(HostPrefix(a)), Table: table}
}

// IIFRule is `iif <link> lookup <table>` at 10 (a strict branch pod's).
func IIFRule(fam kernel.Family, link string, table int) kernel.Rule {
	return kernel.Rule{Priority: PrioVlanIIF, Family: fam, IifName: link, Table: table}
}

// onlySelectors reports whether the rule selects on exactly the given
// fields: a pod rule never carries an oif, a mark, or a selector of the
// other kind.
func onlySelectors(r kernel.Rule, src, dst, iif bool) bool {
	return (r.Src != nil) == src && (r.Dst != nil) == dst && (r.IifName != "") == iif &&
		r.OifName == "" && r.Mark == 0 && r.Mask == 0
}

// IsToPod reports whether r is exactly the 512 rule of address a.
func IsToPod(r kernel.Rule, a netip.Addr) bool {
	got, ok := toPodAddr(r)
	return ok && got == a
}

// IsFromPod reports whether r is exactly a 1536 rule of address a into a
// pod table other than main (the primary ENI's pods have none).
func IsFromPod(r kernel.Rule, a netip.Addr) bool {
	got, ok := fromPodAddr(r)
	return ok && got == a
}

// IsIIF reports whether r is a strict branch pod's prio-10 rule: exactly
// `iif <dev> lookup <VLAN table>`, dev the pod's branch host veth ("vlan"
// and 11 hex digits) or the VLAN link vlan.eth.<id> of that very table.
func IsIIF(r kernel.Rule) bool {
	if r.Priority != PrioVlanIIF || !onlySelectors(r, false, false, true) || !IsVlanTable(r.Table) {
		return false
	}
	if IsBranchHostVeth(r.IifName) {
		return true
	}
	id, ok := VlanLinkID(r.IifName)
	return ok && VlanTable(id) == r.Table
}

func toPodAddr(r kernel.Rule) (netip.Addr, bool) {
	if r.Priority != PrioToPod || r.Table != kernel.TableMain || !onlySelectors(r, false, true, false) {
		return netip.Addr{}, false
	}
	return HostAddr(r.Dst, r.Family)
}

func fromPodAddr(r kernel.Rule) (netip.Addr, bool) {
	if r.Priority != PrioFromPod || r.Table == kernel.TableMain || !IsPodTable(r.Table) || !onlySelectors(r, true, false, false) {
		return netip.Addr{}, false
	}
	return HostAddr(r.Src, r.Family)
}

// Kind is which pod rule a kernel rule is. The values are the label values
// of ipamd's reconciler counter.
type Kind string

const (
	KindToPod   Kind = "rule-to-pod"   // 512: to <pod IP> lookup main
	KindFromPod Kind = "rule-from-pod" // 1536: from <pod IP> lookup <pod table>
	KindIIF     Kind = "rule-iif"      // 10: iif <branch pod link> lookup <VLAN table>
)

// Shape is what a pod rule is keyed by: the pod address for 512 and 1536,
// the input device for 10.
type Shape struct {
	Kind Kind
	IP   netip.Addr // KindToPod, KindFromPod
	Link string     // KindIIF
}

// ShapeOf says which pod rule r has the exact shape of, if any. Shape
// alone proves nothing about whose rule it is: Scope.Owns adds the node's
// and the pool's word on the address and the table.
//
// kernel.Rule does not carry every selector Linux has (ipproto, ports,
// uidrange, tos, "not"): a foreign rule that differs from ours only in
// those looks like ours here, which is why deletes also go through
// ShadowedBy.
func ShapeOf(r kernel.Rule) (Shape, bool) {
	if a, ok := toPodAddr(r); ok {
		return Shape{Kind: KindToPod, IP: a}, true
	}
	if a, ok := fromPodAddr(r); ok {
		return Shape{Kind: KindFromPod, IP: a}, true
	}
	if IsIIF(r) {
		return Shape{Kind: KindIIF, Link: r.IifName}, true
	}
	return Shape{}, false
}
