package invariant

import (
	"fmt"
	"slices"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/kernel"
)

// checkHostNAT: the node's aws-node iptables rules are exactly the plan's
// (an extra one, a duplicate or a stale CIDR, is a LEAK; a missing one
// BROKEN: pod egress leaves untranslated), and rule 1024 is there once
// when the plan wants it, never otherwise.
func checkHostNAT(w World) ([]Violation, error) {
	if w.NAT == nil {
		return nil, nil
	}
	have, err := hostnat.Current(w.NAT)
	if err != nil {
		return nil, err
	}
	var want []hostnat.Rule
	for _, rules := range w.NATPlan.Chains {
		want = append(want, rules...)
	}
	want = append(want, w.NATPlan.Builtins...)
	same := func(a, b hostnat.Rule) bool {
		return a.Table == b.Table && a.Chain == b.Chain && slices.Equal(a.Spec, b.Spec)
	}
	var out []Violation
	for _, r := range have {
		if i := slices.IndexFunc(want, func(x hostnat.Rule) bool { return same(x, r) }); i >= 0 {
			want = slices.Delete(want, i, i+1)
			continue
		}
		if len(r.Spec) == 0 {
			if _, wanted := w.NATPlan.Chains[[2]string{r.Table, r.Chain}]; wanted {
				continue // an empty chain the plan fills: its rules are missing
			}
			out = append(out, Violation{Leak, fmt.Sprintf("iptables chain %s/%s, unwanted and empty", r.Table, r.Chain)})
			continue
		}
		out = append(out, Violation{Leak, "iptables rule " + r.String()})
	}
	for _, r := range want {
		out = append(out, Violation{Broken, "iptables rule missing: " + r.String()})
	}
	for _, f := range w.NATForeign {
		ok, err := hostnat.Contains(w.NAT, f)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, Violation{Foreign, "another agent's iptables rule is gone: " + f.String()})
		}
	}
	rules, err := w.Node.RuleList(kernel.FamilyV4)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, r := range rules {
		if hostnat.IsMarkRule(r) {
			if w.NATPlan.MarkRule && n == 0 && r.Mark == w.NATMark && r.Mask == w.NATMark {
				n++
				continue
			}
			out = append(out, Violation{Leak, "rule " + kernel.RuleString(r)})
		}
	}
	if w.NATPlan.MarkRule && n == 0 {
		out = append(out, Violation{Broken, "missing: " + kernel.RuleString(hostnat.MarkRule(w.NATMark))})
	}
	return out, nil
}
