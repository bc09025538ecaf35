package reconcile

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vpccni/vpccni/internal/naming"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/driver"
)

// Kind is what the reconciler removed. The values are the label values of
// ipamd's reconciler counter (ipamd/metrics).
type Kind string

const (
	KindReleased    Kind = "released"      // an allocation whose pod is gone
	KindRuleToPod   Kind = "rule-to-pod"   // 512: to <pod IP> lookup main
	KindRuleFromPod Kind = "rule-from-pod" // 1536: from <pod IP> lookup <pod table>
	KindRuleIIF     Kind = "rule-iif"      // 10: iif <branch pod link> lookup <VLAN table>
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{KindReleased, KindRuleToPod, KindRuleFromPod, KindRuleIIF}

// Owned says which of ipamd's pod rules a kernel rule is, and what it is
// keyed by: the pod address for 512 and 1536, the input device for 10.
type Owned struct {
	Kind Kind
	IP   netip.Addr // KindRuleToPod, KindRuleFromPod
	Link string     // KindRuleIIF: the device named by iif
}

// Ownership decides whether ipamd owns a rule. Owns is the one the
// reconciler uses; the type exists so tests can put a deliberately wrong
// one in its place and show the suite notices.
type Ownership func(r kernel.Rule, isPodAddress func(netip.Addr) bool) (Owned, bool)

// Owns reports whether r is a rule the pod path makes, exactly as it makes
// it, so that removing it can never remove somebody else's rule:
//
//   - 512, selector exactly `to <IP>/32` (or /128) and nothing else, table
//     main, IP a pool address;
//   - 1536, selector exactly `from <IP>/32` (or /128) and nothing else,
//     table a pod table (driver.IsPodTable), IP a pool address;
//   - 10, selector exactly `iif <dev>` and nothing else, dev the host veth
//     of a strict branch pod ("vlan" + 11 hex) in a VLAN table, or the VLAN
//     link vlan.eth.<id> in its own table id+100.
//
// A rule at one of these priorities with any other shape (a wider prefix,
// an extra src, iif, oif or fwmark, the local or default table, an address
// outside the pool) belongs to someone else: an operator, another CNI, a
// network-policy agent. Owns says nothing about whether the rule is still
// needed; that is the reconciler's question.
//
// kernel.Rule does not carry every selector Linux has (ipproto, ports,
// uidrange, tos, "not"): a foreign rule that differs from ours only in
// those looks like ours here. The seam would have to report them to close
// that gap.
func Owns(r kernel.Rule, isPodAddress func(netip.Addr) bool) (Owned, bool) {
	switch r.Priority {
	case driver.PrioToPod:
		if r.Table != kernel.TableMain || !onlySelectors(r, false, true, false) {
			return Owned{}, false
		}
		ip, ok := hostAddr(r.Dst, r.Family)
		if !ok || !isPodAddress(ip) {
			return Owned{}, false
		}
		return Owned{Kind: KindRuleToPod, IP: ip}, true
	case driver.PrioFromPod:
		if !driver.IsPodTable(r.Table) || !onlySelectors(r, true, false, false) {
			return Owned{}, false
		}
		ip, ok := hostAddr(r.Src, r.Family)
		if !ok || !isPodAddress(ip) {
			return Owned{}, false
		}
		return Owned{Kind: KindRuleFromPod, IP: ip}, true
	case driver.PrioVlanIIF:
		if !onlySelectors(r, false, false, true) || !isVlanTable(r.Table) {
			return Owned{}, false
		}
		if IsBranchHostVeth(r.IifName) {
			return Owned{Kind: KindRuleIIF, Link: r.IifName}, true
		}
		if id, ok := VlanLinkID(r.IifName); ok && id+driver.VlanTableOffset == r.Table {
			return Owned{Kind: KindRuleIIF, Link: r.IifName}, true
		}
	}
	return Owned{}, false
}

// onlySelectors reports whether the rule selects on exactly the given
// fields: a pod rule never carries an oif, a mark, or a selector of the
// other kind.
func onlySelectors(r kernel.Rule, src, dst, iif bool) bool {
	return (r.Src != nil) == src && (r.Dst != nil) == dst && (r.IifName != "") == iif &&
		r.OifName == "" && r.Mark == 0 && r.Mask == 0
}

// hostAddr returns the address of a host prefix (/32 for IPv4, /128 for
// IPv6) of the rule's family that can be a pod's, and false for anything
// else: a wider prefix, a family mismatch, an IPv4-mapped IPv6 address,
// link-local or multicast.
func hostAddr(n *net.IPNet, fam kernel.Family) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if !ok || bits == 0 || ones != bits {
		return netip.Addr{}, false
	}
	switch {
	case len(n.IP) == net.IPv6len && a.Is4In6() && bits == 8*net.IPv4len:
		a = a.Unmap() // IPv4 in its 16-byte form with a 32-bit mask
	case a.Is4() && bits != 8*net.IPv4len, a.Is6() && bits != 8*net.IPv6len:
		return netip.Addr{}, false
	}
	if (fam == kernel.FamilyV4 && !a.Is4()) || (fam == kernel.FamilyV6 && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a, driver.ValidPodAddr(a)
}

// isVlanTable: the table of a branch ENI, VLAN id (1–4094) + 100, and a
// pod table (VLANs 153 and 155 would name default and local).
func isVlanTable(t int) bool {
	id := t - driver.VlanTableOffset
	return id >= 1 && id <= 4094 && driver.IsPodTable(t)
}

// IsBranchHostVeth reports whether name is the host veth of a branch-ENI
// pod in strict mode: "vlan" followed by exactly 11 lowercase hex digits.
func IsBranchHostVeth(name string) bool {
	return IsHostVeth(name, []string{naming.StrictVethPrefix})
}

// IsHostVeth reports whether name is a pod's host veth for one of the
// prefixes: the prefix followed by exactly naming.SuffixLen lowercase hex
// digits (the pod's name hash). Empty prefixes are ignored.
func IsHostVeth(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if p == "" || !strings.HasPrefix(name, p) {
			continue
		}
		if rest := name[len(p):]; len(rest) == naming.SuffixLen && isLowerHex(rest) {
			return true
		}
	}
	return false
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// vlanLinkPrefix is how the branch path names a VLAN link: vlan.eth.<id>
// (driver.Branch.VlanLink).
const vlanLinkPrefix = "vlan.eth."

// VlanLinkID returns the VLAN id of a branch ENI's VLAN link name
// (vlan.eth.<id>, id 1–4094 in decimal without leading zeros).
func VlanLinkID(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, vlanLinkPrefix)
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 4 {
		return 0, false
	}
	id, err := strconv.Atoi(digits)
	if err != nil || id < 1 || id > 4094 || strconv.Itoa(id) != digits {
		return 0, false
	}
	return id, true
}
