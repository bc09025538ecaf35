package model

import (
	"fmt"
	"sort"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

func normRule(r kernel.Rule) (kernel.Rule, error) {
	switch {
	case r.Src != nil:
		r.Family = familyOfNet(r.Src)
	case r.Dst != nil:
		r.Family = familyOfNet(r.Dst)
	}
	if r.Src != nil && r.Dst != nil && familyOfNet(r.Src) != familyOfNet(r.Dst) {
		return r, fmt.Errorf("rule mixes families: %w", syscall.EINVAL)
	}
	if r.Src != nil {
		r.Src = masked(r.Src)
	}
	if r.Dst != nil {
		r.Dst = masked(r.Dst)
	}
	return r, nil
}

func sameRule(a, b kernel.Rule) bool {
	return a.Priority == b.Priority && a.Family == b.Family && sameNet(a.Src, b.Src) && sameNet(a.Dst, b.Dst) &&
		a.IifName == b.IifName && a.OifName == b.OifName && a.Table == b.Table && a.Mark == b.Mark && a.Mask == b.Mask
}

func (n *netns) sortRules() {
	sort.SliceStable(n.rules, func(i, j int) bool { return n.rules[i].Priority < n.rules[j].Priority })
}

// RuleAdd adds a rule after the rules of the same priority (EEXIST for an
// identical one). The interface it names need not exist, and the rule
// outlives it, as in Linux.
func (h *handle) RuleAdd(r kernel.Rule) error {
	r, err := normRule(r)
	if err != nil {
		return err
	}
	if r.Family == kernel.FamilyAll {
		return fmt.Errorf("rule without family: %w", syscall.EAFNOSUPPORT)
	}
	if r.Table == kernel.TableUnspec {
		r.Table = kernel.TableMain
	}
	return h.with(func(n *netns) error {
		if r.Priority == 0 {
			// Linux picks one below the first non-zero priority.
			for _, e := range n.rules {
				if e.Family == r.Family && e.Priority > 0 {
					r.Priority = e.Priority - 1
					break
				}
			}
		}
		for _, e := range n.rules {
			if sameRule(e, r) {
				return fmt.Errorf("rule %d: %w", r.Priority, syscall.EEXIST)
			}
		}
		n.rules = append(n.rules, r)
		n.sortRules()
		return nil
	})
}

// RuleDel deletes the first rule (in priority order) that matches every
// field the request sets, as fib_nl_delrule does.
func (h *handle) RuleDel(r kernel.Rule) error {
	r, err := normRule(r)
	if err != nil {
		return err
	}
	return h.with(func(n *netns) error {
		for i, e := range n.rules {
			if (r.Family != kernel.FamilyAll && e.Family != r.Family) || (r.Priority != 0 && e.Priority != r.Priority) ||
				(r.Table != 0 && e.Table != r.Table) || (r.Src != nil && !sameNet(e.Src, r.Src)) ||
				(r.Dst != nil && !sameNet(e.Dst, r.Dst)) || (r.IifName != "" && e.IifName != r.IifName) ||
				(r.OifName != "" && e.OifName != r.OifName) || (r.Mark != 0 && e.Mark != r.Mark) {
				continue
			}
			n.rules = append(n.rules[:i], n.rules[i+1:]...)
			return nil
		}
		return fmt.Errorf("rule %d: %w", r.Priority, syscall.ENOENT)
	})
}

func (h *handle) RuleList(family kernel.Family) (out []kernel.Rule, err error) {
	err = h.with(func(n *netns) error {
		for _, r := range n.rules {
			if family == kernel.FamilyAll || r.Family == family {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}
