package driver

import (
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
// deletes each match by its full description, so it can never remove a
// rule the matcher did not select, and it terminates even if the kernel
// keeps answering (no delete-until-ENOENT loop).
func deleteRules(h kernel.API, m ruleMatcher) ([]kernel.Rule, error) {
	rules, err := h.RuleList(m.family)
	if err != nil {
		return nil, err
	}
	var gone []kernel.Rule
	for _, r := range rules {
		if !m.match(r) {
			continue
		}
		if err := h.RuleDel(r); ignoreNotFound(err) != nil {
			return gone, err
		}
		gone = append(gone, r)
	}
	return gone, nil
}
