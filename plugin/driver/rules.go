package driver

import (
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// ruleMatcher selects rules by what they are, not by position.
type ruleMatcher struct {
	family kernel.Family
	match  func(kernel.Rule) bool
}

// toPodRuleMatcher: exactly `to <a> lookup main` at 512.
func toPodRuleMatcher(a netip.Addr) ruleMatcher {
	return ruleMatcher{family: ownership.Family(a), match: func(r kernel.Rule) bool { return ownership.IsToPod(r, a) }}
}

// fromPodRuleMatcher: exactly `from <a> lookup T` at 1536, for tables the
// predicate accepts (never a non-pod table, never main).
func fromPodRuleMatcher(a netip.Addr, table func(int) bool) ruleMatcher {
	return ruleMatcher{family: ownership.Family(a), match: func(r kernel.Rule) bool { return ownership.IsFromPod(r, a) && table(r.Table) }}
}

// iifRuleMatcher: a strict branch pod's prio-10 iif rules the predicate
// accepts.
func iifRuleMatcher(fam kernel.Family, also func(kernel.Rule) bool) ruleMatcher {
	return ruleMatcher{family: fam, match: func(r kernel.Rule) bool { return ownership.IsIIF(r) && also(r) }}
}

// ruleView is the node's rule listing a teardown shares between its
// reading of the node and its deletes (ownership.RuleView).
type ruleView = ownership.RuleView

func listRules(h kernel.API, fam kernel.Family) (*ruleView, error) {
	return ownership.ListRules(h, fam)
}

// deleteRules removes every rule the matcher selects, through the one
// remover the audit's --fix also uses (ownership.DeleteRules): a match a
// delete request could confuse with a foreign rule is left in place and
// named in a ShadowedRuleError, so the DEL fails (the runtime retries, the
// address stays allocated while its rule is there).
func deleteRules(h kernel.API, v *ruleView, m ruleMatcher) ([]kernel.Rule, error) {
	return ownership.DeleteRules(h, v, m.family, m.match)
}

// ShadowedRuleError says that a rule of the pod was left in place because
// the kernel could answer its delete request by removing another rule.
type ShadowedRuleError = ownership.ShadowedRuleError
