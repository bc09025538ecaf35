package driver

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
)

// toPodRule is `to <pod IP> lookup main` at 512: traffic to the pod is
// routed by the main table (its host route), whatever ENI it came in on.
func toPodRule(p netip.Prefix) kernel.Rule {
	return kernel.Rule{Priority: PrioToPod, Family: family(p.Addr()), Dst: ipNet(p), Table: kernel.TableMain}
}

// ruleMatcher selects rules by what they are, not by position.
type ruleMatcher struct {
	family kernel.Family
	match  func(kernel.Rule) bool
}

// onlySelector reports whether a rule carries no selector other than the
// ones a pod rule has: a rule with a mark, an oif or an extra prefix is
// somebody else's even at our priority.
func onlySelector(r kernel.Rule, src, dst bool) bool {
	return (r.Src != nil) == src && (r.Dst != nil) == dst && r.IifName == "" && r.OifName == "" && r.Mark == 0 && r.Mask == 0
}

// toPodRuleMatcher: exactly `to <pfx> lookup main` at 512.
func toPodRuleMatcher(p netip.Prefix) ruleMatcher {
	return ruleMatcher{family: family(p.Addr()), match: func(r kernel.Rule) bool {
		return r.Priority == PrioToPod && r.Table == kernel.TableMain && onlySelector(r, false, true) && samePrefix(r.Dst, p)
	}}
}

// fromPodRuleMatcher: exactly `from <pfx> lookup T` at 1536 for tables the
// predicate accepts (never a non-pod table).
func fromPodRuleMatcher(p netip.Prefix, table func(int) bool) ruleMatcher {
	return ruleMatcher{family: family(p.Addr()), match: func(r kernel.Rule) bool {
		return r.Priority == PrioFromPod && IsPodTable(r.Table) && r.Table != kernel.TableMain && table(r.Table) &&
			onlySelector(r, true, false) && samePrefix(r.Src, p)
	}}
}

// deleteRules removes every rule the matcher selects. It lists first and
// deletes each match by its full description, and it terminates even if
// the kernel keeps answering (no delete-until-ENOENT loop).
//
// A description is not an identity, though: Linux deletes the first rule,
// in list order, that has every selector the request sets, and selectors
// the request leaves out (iif, oif, fwmark, src of a `to` rule, dst of a
// `from` rule, and those kernel.Rule cannot even show, such as ipproto,
// sport/dport, uidrange, tos or `not`) are wildcards: there is no "iif
// none" in a delete request (an empty iif name, a zero prefix length, a
// zero mark all mean "any"), so no request form names the pod's rule
// alone. A foreign `512: to X iif eth0 lookup main` listed before the pod's
// `512: to X lookup main` is what a delete of the pod's rule removes. (One
// with an extra src or dst cannot come first: Linux's add skips address
// selectors the new rule leaves unset too, so the pod's add after it is
// EEXIST.)
//
// So before each delete the listing is searched for a rule the request
// would reach first (shadowedBy; ipamd's reconciler guards its deletes the
// same way); if there is one, the pod's rule is left in place and a
// ShadowedRuleError names the foreign rule. Deleting anyway and putting
// the foreign rule back is no remedy: in between the node routes without
// it, and a failed re-add loses it. Refusing makes the DEL fail (the
// runtime retries, the address stays allocated while its rule is there)
// with a message an operator can act on. The other matches are still
// deleted, so one refusal leaves as little behind as possible. A rule
// added between the listing and the delete is not seen: netlink offers no
// conditional delete.
func deleteRules(h kernel.API, m ruleMatcher) ([]kernel.Rule, error) {
	rules, err := h.RuleList(m.family)
	if err != nil {
		return nil, err
	}
	var gone []kernel.Rule
	var refused []error
	deleted := make([]bool, len(rules))
	for i, r := range rules {
		if !m.match(r) {
			continue
		}
		if blocker, why, shadowed := shadowedBy(rules, deleted, i); shadowed {
			refused = append(refused, &ShadowedRuleError{Rule: r, Foreign: blocker, Reason: why})
			continue
		}
		if err := h.RuleDel(r); ignoreNotFound(err) != nil {
			return gone, errors.Join(append(refused, err)...)
		}
		deleted[i] = true
		gone = append(gone, r)
	}
	return gone, errors.Join(refused...)
}

// ShadowedRuleError says that a rule of the pod was left in place because
// the kernel would answer its delete request by removing another rule.
type ShadowedRuleError struct {
	Rule    kernel.Rule // the pod's rule, still there
	Foreign kernel.Rule // the rule a delete request would remove instead
	Reason  string
}

func (e *ShadowedRuleError) Error() string {
	return fmt.Sprintf("%q left in place: %s %q (a delete request matches every rule that has at least its selectors, "+
		"first in list order); remove or re-order that rule and retry", kernel.RuleString(e.Rule), e.Reason, kernel.RuleString(e.Foreign))
}

// shadowedBy answers, for rules[i] (with the rules this pass already
// deleted marked): is there another rule the kernel could take for it when
// asked to delete it? Two cases:
//
//   - a rule listed before it that the delete request matches: one with the
//     same priority, table and selectors plus selectors of its own;
//   - a rule anywhere in the listing that looks identical to it. Linux
//     refuses to add an exact duplicate (EEXIST), so two rules that read
//     the same differ in a selector kernel.Rule does not carry (ipproto,
//     ports, uidrange, tos, `not`, l3mdev…), and nothing tells which of
//     them is the pod's.
func shadowedBy(rules []kernel.Rule, deleted []bool, i int) (kernel.Rule, string, bool) {
	r := rules[i]
	for j, e := range rules {
		if j == i || deleted[j] || e.Family != r.Family {
			continue
		}
		if sameRule(e, r) {
			return e, "another rule reads the same but differs in a selector not shown here:", true
		}
		if j < i && delRequestMatches(r, e) {
			return e, "a delete request for it would remove", true
		}
	}
	return kernel.Rule{}, "", false
}

// delRequestMatches is the kernel's rule lookup for a delete request q
// (fib_nl_delrule's rule_find and the family's compare): fields q leaves
// zero match anything.
func delRequestMatches(q, e kernel.Rule) bool {
	return (q.Priority == 0 || e.Priority == q.Priority) && (q.Table == 0 || e.Table == q.Table) &&
		(q.Src == nil || sameNet(e.Src, q.Src)) && (q.Dst == nil || sameNet(e.Dst, q.Dst)) &&
		(q.IifName == "" || e.IifName == q.IifName) && (q.OifName == "" || e.OifName == q.OifName) &&
		(q.Mark == 0 || e.Mark == q.Mark) && (q.Mask == 0 || e.Mask == q.Mask)
}

// sameRule compares every field a listed rule shows.
func sameRule(a, b kernel.Rule) bool {
	return a.Priority == b.Priority && a.Family == b.Family && a.Table == b.Table &&
		sameNet(a.Src, b.Src) && sameNet(a.Dst, b.Dst) && a.IifName == b.IifName &&
		a.OifName == b.OifName && a.Mark == b.Mark && a.Mask == b.Mask
}

// sameNet compares two selectors (nil is "all"), whatever the byte form of
// their addresses.
func sameNet(a, b *net.IPNet) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	la, oka := prefixLen(a)
	lb, okb := prefixLen(b)
	return oka && okb && la == lb
}

// prefixLen is a selector's address (unmapped) and prefix length counted
// on that address, so 10.0.0.0/24 reads the same with a 4- or 16-byte mask.
func prefixLen(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	p := netip.PrefixFrom(a, ones-(bits-a.BitLen()))
	return p, p.IsValid()
}
