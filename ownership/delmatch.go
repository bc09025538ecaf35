package ownership

import (
	"net"

	"github.com/vpccni/vpccni/kernel"
)

// Linux deletes the first rule, in list order, that has every selector the
// delete request sets, and selectors the request leaves out (iif, oif,
// fwmark, the src of a `to` rule, the dst of a `from` rule, and those
// kernel.Rule cannot even show, such as ipproto, sport/dport, uidrange, tos
// or `not`) are wildcards: there is no "iif none" in a delete request (an
// empty iif name, a zero prefix length, a zero mark all mean "any"), so no
// request form names a pod's rule alone. A foreign `512: to X iif eth0
// lookup main` listed before the pod's `512: to X lookup main` is what a
// delete of the pod's rule removes. (One with an extra src or dst cannot
// come first: Linux's add skips address selectors the new rule leaves
// unset too, so the pod's add after it is EEXIST.)
//
// So every remover searches the listing for a rule the request would reach
// first (ShadowedBy) and, if there is one, leaves the pod's rule in place
// and says which foreign rule is in the way. Deleting anyway and putting
// the foreign rule back is no remedy: in between the node routes without
// it, and a failed re-add loses it. A rule added between the listing and
// the delete is not seen: netlink offers no conditional delete.

// ShadowedBy answers, for rules[i] (rules in the kernel's order, with
// those this pass already deleted marked in gone, which may be nil): is
// there another rule the kernel could take for it when asked to delete it?
// Two cases:
//
//   - a rule listed before it that the delete request matches: one with
//     the same priority, table and selectors plus selectors of its own;
//   - a rule anywhere in the listing that looks identical to it. Linux
//     refuses to add an exact duplicate (EEXIST), so two rules that read
//     the same differ in a selector kernel.Rule does not carry (ipproto,
//     ports, uidrange, tos, `not`, l3mdev…), and nothing tells which of
//     them is the pod's.
//
// why says which case, for the remover's message.
func ShadowedBy(rules []kernel.Rule, gone []bool, i int) (foreign kernel.Rule, why string, shadowed bool) {
	r := rules[i]
	for j, e := range rules {
		if j == i || (gone != nil && gone[j]) || e.Family != r.Family {
			continue
		}
		if SameRule(e, r) {
			return e, "another rule reads the same but differs in a selector not shown here:", true
		}
		if j < i && DelRequestMatches(r, e) {
			return e, "a delete request for it would remove", true
		}
	}
	return kernel.Rule{}, "", false
}

// DelRequestMatches is the kernel's rule lookup for a delete request q
// (fib_nl_delrule's rule_find and the family's compare): fields q leaves
// zero match anything.
func DelRequestMatches(q, e kernel.Rule) bool {
	return (q.Priority == 0 || e.Priority == q.Priority) && (q.Table == 0 || e.Table == q.Table) &&
		(q.Src == nil || SameNet(e.Src, q.Src)) && (q.Dst == nil || SameNet(e.Dst, q.Dst)) &&
		(q.IifName == "" || e.IifName == q.IifName) && (q.OifName == "" || e.OifName == q.OifName) &&
		(q.Mark == 0 || e.Mark == q.Mark) && (q.Mask == 0 || e.Mask == q.Mask)
}

// SameRule compares every field a listed rule shows.
func SameRule(a, b kernel.Rule) bool {
	return a.Priority == b.Priority && a.Family == b.Family && a.Table == b.Table &&
		SameNet(a.Src, b.Src) && SameNet(a.Dst, b.Dst) && a.IifName == b.IifName &&
		a.OifName == b.OifName && a.Mark == b.Mark && a.Mask == b.Mask
}

// SameNet compares two selectors (nil is "all"), whatever the byte form of
// their addresses.
func SameNet(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	pa, oka := kernel.Prefix(a)
	pb, okb := kernel.Prefix(b)
	return oka && okb && pa == pb
}

// IndexOf is the position of the first listed rule that reads the same as
// r, or -1.
func IndexOf(rules []kernel.Rule, r kernel.Rule) int {
	for i, e := range rules {
		if SameRule(e, r) {
			return i
		}
	}
	return -1
}
