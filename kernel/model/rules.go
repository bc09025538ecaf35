package model

import (
	"fmt"
	"sort"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// normRule derives what netlink derives: the family from Src/Dst (EINVAL
// when they differ), else Family, else IPv4 (netlink's default); a /0
// selector is no selector; Mark without Mask gets the full mask. Src and
// Dst keep their host bits, as the kernel keeps them.
func normRule(r kernel.Rule) (kernel.Rule, error) {
	r = copyRule(r)
	r.Src, r.Dst = defaultNet(r.Src), defaultNet(r.Dst)
	if r.Src != nil && r.Dst != nil && familyOfNet(r.Src) != familyOfNet(r.Dst) {
		return r, fmt.Errorf("rule mixes families: %w", syscall.EINVAL)
	}
	switch {
	case r.Src != nil:
		r.Family = familyOfNet(r.Src)
	case r.Dst != nil:
		r.Family = familyOfNet(r.Dst)
	case r.Family == kernel.FamilyAll:
		r.Family = kernel.FamilyV4
	}
	if r.Family != kernel.FamilyV4 && r.Family != kernel.FamilyV6 {
		return r, fmt.Errorf("rule family %d: %w", r.Family, syscall.EAFNOSUPPORT)
	}
	if len(r.IifName) > kernel.MaxLinkNameLen || len(r.OifName) > kernel.MaxLinkNameLen {
		return r, fmt.Errorf("rule interface name too long: %w", syscall.ERANGE)
	}
	if r.Mark != 0 && r.Mask == 0 {
		r.Mask = 0xffffffff
	}
	return r, nil
}

// ruleExists is the kernel's rule_exists, which makes an add EEXIST:
// priority, table, interfaces, mark and mask compare exactly, but the
// addresses only when the new rule sets them (fib4_rule_compare and
// fib6_rule_compare skip a selector whose prefix length is 0). So once
// "512: from Y to X lookup main" exists, "512: to X lookup main" and
// "512: lookup main" are refused, while the reverse order adds both
// (measured by kernel/linux's TestDifferential).
func ruleExists(e, r kernel.Rule) bool {
	return e.Priority == r.Priority && e.Family == r.Family && (r.Src == nil || sameNet(e.Src, r.Src)) &&
		(r.Dst == nil || sameNet(e.Dst, r.Dst)) && e.IifName == r.IifName && e.OifName == r.OifName &&
		e.Table == r.Table && e.Mark == r.Mark && e.Mask == r.Mask
}

func (n *netns) sortRules() {
	sort.SliceStable(n.rules, func(i, j int) bool { return n.rules[i].Priority < n.rules[j].Priority })
}

// defaultPref is fib_default_rule_pref: one below the priority of the
// family's second rule when that is not 0 (with the default rules, 32765
// for IPv6, and one below the first rule added after "0: lookup local").
func (n *netns) defaultPref(fam kernel.Family) int {
	seen := 0
	for _, e := range n.rules {
		if e.Family != fam {
			continue
		}
		if seen++; seen == 2 {
			if e.Priority > 0 {
				return e.Priority - 1
			}
			return 0
		}
	}
	return 0
}

// RuleAdd adds a rule after the rules of the same priority; EEXIST when
// one exists that it does not tell apart (see ruleExists). Priority 0
// means "pick one" (see defaultPref). Table 0 gets a fresh, unused table
// for IPv4 (fib_empty_table) and is EINVAL for IPv6, as Linux does. The
// interfaces a rule names need not exist, and the rule outlives them.
func (h *handle) RuleAdd(r kernel.Rule) error {
	r, err := normRule(r)
	if err != nil {
		return err
	}
	return h.change(func(n *netns) error {
		if r.Priority == 0 {
			r.Priority = n.defaultPref(r.Family)
		}
		// fib_newrule's order: the duplicate check first, with table 0
		// still 0 (so it matches nothing), then the family's configure.
		for _, e := range n.rules {
			if ruleExists(e, r) {
				return fmt.Errorf("rule %s: %w", kernel.RuleString(r), syscall.EEXIST)
			}
		}
		switch {
		case r.Family == kernel.FamilyV6 && r.Table == kernel.TableUnspec:
			return fmt.Errorf("IPv6 rule without table: %w", syscall.EINVAL)
		case r.Family == kernel.FamilyV6:
			n.tables[table{r.Family, r.Table}] = true // fib6_rule_configure creates it
			n.v6CustomRules = true
		case r.Table == kernel.TableUnspec:
			for t := 1; ; t++ { // fib_empty_table; a table an IPv4 rule names is not made
				if !n.tables[table{r.Family, t}] {
					r.Table, n.tables[table{r.Family, t}] = t, true
					break
				}
			}
		}
		if r.Family == kernel.FamilyV4 {
			n.v4CustomRules = true
		}
		n.rules = append(n.rules, r)
		n.sortRules()
		return nil
	})
}

// RuleDel deletes the first rule of the family, in priority order, that
// matches every field the request sets, as fib_nl_delrule's rule_find
// does: Priority, Table, Src, Dst, IifName, OifName, Mark and Mask are
// wildcards when zero. ENOENT when none matches.
func (h *handle) RuleDel(r kernel.Rule) error {
	r, err := normRule(r)
	if err != nil {
		return err
	}
	return h.change(func(n *netns) error {
		for i, e := range n.rules {
			if e.Family != r.Family || (r.Priority != 0 && e.Priority != r.Priority) || (r.Table != 0 && e.Table != r.Table) ||
				(r.Src != nil && !sameNet(e.Src, r.Src)) || (r.Dst != nil && !sameNet(e.Dst, r.Dst)) ||
				(r.IifName != "" && e.IifName != r.IifName) || (r.OifName != "" && e.OifName != r.OifName) ||
				(r.Mark != 0 && e.Mark != r.Mark) || (r.Mask != 0 && e.Mask != r.Mask) {
				continue
			}
			n.rules = append(n.rules[:i], n.rules[i+1:]...)
			if r.Family == kernel.FamilyV4 {
				n.v4CustomRules = true // fib4_rule_delete unmerges too
			}
			return nil
		}
		return fmt.Errorf("rule %s: %w", kernel.RuleString(r), syscall.ENOENT)
	})
}

// RuleList lists the rules of a family (FamilyAll: IPv4's, then IPv6's),
// each in priority order.
func (h *handle) RuleList(family kernel.Family) (out []kernel.Rule, err error) {
	err = h.with(func(n *netns) error {
		var c copier
		out = make([]kernel.Rule, 0, len(n.rules))
		for _, f := range []kernel.Family{kernel.FamilyV4, kernel.FamilyV6} {
			if family != kernel.FamilyAll && family != f {
				continue
			}
			for _, r := range n.rules {
				if r.Family == f {
					out = append(out, c.rule(r))
				}
			}
		}
		return nil
	})
	return out, err
}
