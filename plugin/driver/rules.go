package driver

import (
	"errors"
	"fmt"
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
	return ruleMatcher{family: family(a), match: func(r kernel.Rule) bool { return ownership.IsToPod(r, a) }}
}

// fromPodRuleMatcher: exactly `from <a> lookup T` at 1536, for tables the
// predicate accepts (never a non-pod table, never main).
func fromPodRuleMatcher(a netip.Addr, table func(int) bool) ruleMatcher {
	return ruleMatcher{family: family(a), match: func(r kernel.Rule) bool { return ownership.IsFromPod(r, a) && table(r.Table) }}
}

// iifRuleMatcher: a strict branch pod's prio-10 iif rules the predicate
// accepts.
func iifRuleMatcher(fam kernel.Family, also func(kernel.Rule) bool) ruleMatcher {
	return ruleMatcher{family: fam, match: func(r kernel.Rule) bool { return ownership.IsIIF(r) && also(r) }}
}

// ruleView is one listing of the node's rules that a teardown reads the
// node from and deletes from: a DEL dumps the rules once however many it
// removes (a node of 250 pods has 500 of them; dumping and parsing them
// costs about a millisecond). A rule deleted is marked, not dropped, so
// ShadowedBy keeps judging the rest against what the kernel still holds.
// A rule added by somebody else after the listing is not seen, as it was
// not between a listing and its delete before: the window is one DEL's
// teardown instead of one delete's.
type ruleView struct {
	fam     kernel.Family
	rules   []kernel.Rule
	deleted []bool
}

func listRules(h kernel.API, fam kernel.Family) (*ruleView, error) {
	rules, err := h.RuleList(fam)
	if err != nil {
		return nil, err
	}
	return &ruleView{fam: fam, rules: rules, deleted: make([]bool, len(rules))}, nil
}

func (v *ruleView) covers(fam kernel.Family) bool {
	return v != nil && (v.fam == kernel.FamilyAll || v.fam == fam)
}

// deleteRules removes every rule the matcher selects, from the view when
// it covers the matcher's family, else from a listing of its own. It
// deletes each match by its full description, and it terminates even if
// the kernel keeps answering (no delete-until-ENOENT loop). A match that a
// delete request could confuse with a foreign rule (ownership.ShadowedBy)
// is left in place and named in a ShadowedRuleError: the DEL fails (the
// runtime retries, the address stays allocated while its rule is there)
// with a message an operator can act on. The other matches are still
// deleted, so one refusal leaves as little behind as possible.
func deleteRules(h kernel.API, v *ruleView, m ruleMatcher) ([]kernel.Rule, error) {
	if !v.covers(m.family) {
		var err error
		if v, err = listRules(h, m.family); err != nil {
			return nil, err
		}
	}
	var gone []kernel.Rule
	var refused []error
	for i, r := range v.rules {
		if v.deleted[i] || (v.fam == kernel.FamilyAll && r.Family != m.family) || !m.match(r) {
			continue
		}
		if blocker, why, shadowed := ownership.ShadowedBy(v.rules, v.deleted, i); shadowed {
			refused = append(refused, &ShadowedRuleError{Rule: r, Foreign: blocker, Reason: why})
			continue
		}
		if err := h.RuleDel(r); ignoreNotFound(err) != nil {
			return gone, errors.Join(append(refused, err)...)
		}
		v.deleted[i] = true
		gone = append(gone, r)
	}
	return gone, errors.Join(refused...)
}

// ShadowedRuleError says that a rule of the pod was left in place because
// the kernel could answer its delete request by removing another rule.
type ShadowedRuleError struct {
	Rule    kernel.Rule // the pod's rule, still there
	Foreign kernel.Rule // the rule a delete request could remove instead
	Reason  string
}

func (e *ShadowedRuleError) Error() string {
	return fmt.Sprintf("%q left in place: %s %q (a delete request matches every rule that has at least its selectors, "+
		"first in list order); remove or re-order that rule and retry", kernel.RuleString(e.Rule), e.Reason, kernel.RuleString(e.Foreign))
}
