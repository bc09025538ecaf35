package ownership

import (
	"errors"
	"fmt"

	"github.com/vpccni/vpccni/kernel"
)

// RuleView is one listing of the node's rules that a remover reads the
// node from and deletes from: the plugin's teardown and the node audit's
// --fix both delete through it, so what one may remove the other may too,
// and nothing else. A DEL dumps the rules once however many it removes (a
// node of 250 pods has 500 of them; dumping and parsing them costs about a
// millisecond). A rule deleted is marked, not dropped, so ShadowedBy keeps
// judging the rest against what the kernel still holds. A rule added by
// somebody else after the listing is not seen, as it was not between a
// listing and its delete before: the window is one teardown instead of
// one delete.
type RuleView struct {
	fam     kernel.Family
	rules   []kernel.Rule
	deleted []bool
}

// ListRules lists the node's rules of a family (FamilyAll: both).
func ListRules(k kernel.API, fam kernel.Family) (*RuleView, error) {
	rules, err := k.RuleList(fam)
	if err != nil {
		return nil, err
	}
	return &RuleView{fam: fam, rules: rules, deleted: make([]bool, len(rules))}, nil
}

// Covers says whether the view lists the rules of fam.
func (v *RuleView) Covers(fam kernel.Family) bool {
	return v != nil && (v.fam == kernel.FamilyAll || v.fam == fam)
}

// Listed is every rule of the listing, deleted ones included, in the
// kernel's order (what a node is read from before any delete).
func (v *RuleView) Listed() []kernel.Rule { return v.rules }

// Remaining is the rules of the listing this view has not deleted, in the
// kernel's order.
func (v *RuleView) Remaining() []kernel.Rule {
	out := make([]kernel.Rule, 0, len(v.rules))
	for i, r := range v.rules {
		if !v.deleted[i] {
			out = append(out, r)
		}
	}
	return out
}

// DeleteRules removes every rule of family fam that match selects, from v
// when it covers fam, else from a listing of its own (v may be nil). It
// deletes each match by its full description, and it terminates even if
// the kernel keeps answering (no delete-until-ENOENT loop). A match that a
// delete request could confuse with a foreign rule (ShadowedBy) is left in
// place and named in a ShadowedRuleError, so the caller fails with a
// message an operator can act on; the other matches are still deleted, so
// one refusal leaves as little behind as possible. match must accept only
// rules the caller has proved are a pod's (ShapeOf and Scope.Owns): this
// function judges only whether a delete request would take that rule and
// no other.
func DeleteRules(k kernel.API, v *RuleView, fam kernel.Family, match func(kernel.Rule) bool) ([]kernel.Rule, error) {
	if !v.Covers(fam) {
		var err error
		if v, err = ListRules(k, fam); err != nil {
			return nil, err
		}
	}
	var gone []kernel.Rule
	var refused []error
	for i, r := range v.rules {
		if v.deleted[i] || (fam != kernel.FamilyAll && r.Family != fam) || !match(r) {
			continue
		}
		if blocker, why, shadowed := ShadowedBy(v.rules, v.deleted, i); shadowed {
			refused = append(refused, &ShadowedRuleError{Rule: r, Foreign: blocker, Reason: why})
			continue
		}
		if err := k.RuleDel(r); err != nil && !kernel.IsNotFound(err) {
			return gone, errors.Join(append(refused, err)...)
		}
		v.deleted[i] = true
		gone = append(gone, r)
	}
	return gone, errors.Join(refused...)
}

// ShadowedRuleError says that a rule of a pod was left in place because
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
