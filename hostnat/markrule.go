package hostnat

import (
	"fmt"

	"github.com/vpccni/vpccni/kernel"
)

// MarkRulePriority is the priority of rule `fwmark MARK/MARK lookup main`:
// marked traffic (replies of a connection that came in on, or left
// through, the primary ENI) is routed by the main table, before the pods'
// rules 1536 would send it out of the pod's ENI.
const MarkRulePriority = 1024

// MarkRule is the rule for a mark.
func MarkRule(mark uint32) kernel.Rule {
	return kernel.Rule{Priority: MarkRulePriority, Family: kernel.FamilyV4, Mark: mark, Mask: mark, Table: kernel.TableMain}
}

// IsMarkRule reports whether r is a rule 1024 to main by fwmark, whatever
// its mark: aws-node's, for this mark or an earlier one.
func IsMarkRule(r kernel.Rule) bool {
	return r.Priority == MarkRulePriority && r.Table == kernel.TableMain && r.Mark != 0 && r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == ""
}

// ReconcileMarkRule keeps rule 1024 for mark when want, once, and no rule
// 1024 to main by another fwmark (AWS_VPC_K8S_CNI_CONNMARK changed).
func ReconcileMarkRule(k kernel.API, mark uint32, want bool) ([]Change, error) {
	rules, err := k.RuleList(kernel.FamilyV4)
	if err != nil {
		return nil, fmt.Errorf("ip rule list: %w", err)
	}
	var changes []Change
	kept := false
	for _, r := range rules {
		if !IsMarkRule(r) {
			continue
		}
		if want && !kept && r.Mark == mark && r.Mask == mark {
			kept = true
			continue
		}
		if err := k.RuleDel(r); err != nil && !kernel.IsNotFound(err) {
			return changes, fmt.Errorf("ip rule del %s: %w", kernel.RuleString(r), err)
		}
		changes = append(changes, Change{"delete", "ip rule " + kernel.RuleString(r)})
	}
	if want && !kept {
		r := MarkRule(mark)
		if err := k.RuleAdd(r); err != nil {
			return changes, fmt.Errorf("ip rule add %s: %w", kernel.RuleString(r), err)
		}
		changes = append(changes, Change{"add", "ip rule " + kernel.RuleString(r)})
	}
	return changes, nil
}
