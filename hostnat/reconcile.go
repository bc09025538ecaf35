package hostnat

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Change is one thing Reconcile did, for the log.
type Change struct {
	Op   string // "add", "delete", "rewrite", "new-chain", "delete-chain"
	What string
}

func (c Change) String() string { return c.Op + " " + c.What }

// Reconcile makes the tables hold exactly the plan's aws-node rules:
// the owned chains it wants, whole and in order (rewritten when they
// differ); each wanted rule of a built-in chain once; no other aws-node
// rule (a stale CIDR, a duplicate, a feature turned off) and no owned
// chain it does not want. Rules it does not own are never touched. It is
// idempotent: a second run changes nothing.
func Reconcile(t Tables, p Plan) ([]Change, error) {
	var changes []Change
	for _, key := range sortedKeys(p.Chains) {
		c, err := syncChain(t, key[0], key[1], p.Chains[key])
		if err != nil {
			return changes, err
		}
		changes = append(changes, c...)
	}
	for _, b := range builtins {
		var want []Rule
		for _, r := range p.Builtins {
			if r.Table == b[0] && r.Chain == b[1] {
				want = append(want, r)
			}
		}
		c, err := syncBuiltin(t, b[0], b[1], want)
		if err != nil {
			return changes, err
		}
		changes = append(changes, c...)
	}
	c, err := dropChains(t, p)
	return append(changes, c...), err
}

// Remove deletes every aws-node rule and chain: Reconcile with nothing
// wanted.
func Remove(t Tables) ([]Change, error) {
	return Reconcile(t, Plan{})
}

// syncChain makes an owned chain hold want, in order.
func syncChain(t Tables, table, chain string, want []Rule) ([]Change, error) {
	var changes []Change
	exists, err := t.ChainExists(table, chain)
	if err != nil {
		return nil, fmt.Errorf("iptables -t %s: is there a chain %s: %w", table, chain, err)
	}
	if !exists {
		if err := t.NewChain(table, chain); err != nil {
			return nil, fmt.Errorf("iptables -t %s -N %s: %w", table, chain, err)
		}
		changes = append(changes, Change{"new-chain", table + "/" + chain})
	}
	have, err := listRules(t, table, chain)
	if err != nil {
		return changes, err
	}
	if slices.EqualFunc(have, want, func(a, b Rule) bool { return slices.Equal(a.Spec, b.Spec) }) {
		return changes, nil
	}
	// Rewritten whole: the order matters (the RETURNs before the SNAT or
	// mark rule), and a chain of a few rules is cheaper to write again
	// than to patch.
	if err := t.ClearChain(table, chain); err != nil {
		return changes, fmt.Errorf("iptables -t %s -F %s: %w", table, chain, err)
	}
	for _, r := range want {
		if err := t.Append(table, chain, r.Spec...); err != nil {
			return changes, fmt.Errorf("iptables %s: %w", r, err)
		}
	}
	return append(changes, Change{"rewrite", fmt.Sprintf("%s/%s (%d rules, was %d)", table, chain, len(want), len(have))}), nil
}

// syncBuiltin keeps one copy of each wanted rule among a built-in chain's
// aws-node rules and deletes the others.
func syncBuiltin(t Tables, table, chain string, want []Rule) ([]Change, error) {
	have, err := listRules(t, table, chain)
	if err != nil {
		return nil, err
	}
	var changes []Change
	found := make([]bool, len(want))
	for _, r := range have {
		if !Owned(r.Spec) {
			continue
		}
		i := slices.IndexFunc(want, func(w Rule) bool { return slices.Equal(w.Spec, r.Spec) })
		if i >= 0 && !found[i] {
			found[i] = true
			continue
		}
		if err := t.Delete(table, chain, r.Spec...); err != nil {
			return changes, fmt.Errorf("iptables -t %s -D %s %s: %w", table, chain, quoteSpec(r.Spec), err)
		}
		changes = append(changes, Change{"delete", r.String()})
	}
	for i, r := range want {
		if found[i] {
			continue
		}
		if err := t.Append(table, chain, r.Spec...); err != nil {
			return changes, fmt.Errorf("iptables %s: %w", r, err)
		}
		changes = append(changes, Change{"add", r.String()})
	}
	return changes, nil
}

// dropChains deletes the owned chains the plan does not want. The jumps
// to them are gone by now (syncBuiltin removed every aws-node rule it
// does not want); a jump from a chain aws-node does not own makes the
// delete fail, and that is reported rather than forced.
func dropChains(t Tables, p Plan) ([]Change, error) {
	var changes []Change
	for _, table := range []string{NAT, Mangle} {
		chains, err := t.ListChains(table)
		if err != nil {
			return changes, fmt.Errorf("iptables -t %s: list chains: %w", table, err)
		}
		for _, chain := range chains {
			if !OwnedChain(chain) {
				continue
			}
			if _, wanted := p.Chains[[2]string{table, chain}]; wanted {
				continue
			}
			if err := t.ClearChain(table, chain); err != nil {
				return changes, fmt.Errorf("iptables -t %s -F %s: %w", table, chain, err)
			}
			if err := t.DeleteChain(table, chain); err != nil {
				return changes, fmt.Errorf("iptables -t %s -X %s: %w", table, chain, err)
			}
			changes = append(changes, Change{"delete-chain", table + "/" + chain})
		}
	}
	return changes, nil
}

// Current is every aws-node rule the tables hold: the owned chains' rules
// and the aws-node rules of the built-in chains, with an empty owned chain
// as one Rule without a spec.
func Current(t Tables) ([]Rule, error) {
	var out []Rule
	for _, table := range []string{NAT, Mangle} {
		chains, err := t.ListChains(table)
		if err != nil {
			return nil, fmt.Errorf("iptables -t %s: list chains: %w", table, err)
		}
		for _, chain := range chains {
			owned := OwnedChain(chain)
			if !owned && !slices.Contains(builtins, [2]string{table, chain}) {
				continue
			}
			rules, err := listRules(t, table, chain)
			if err != nil {
				return nil, err
			}
			if owned && len(rules) == 0 {
				out = append(out, Rule{Table: table, Chain: chain})
			}
			for _, r := range rules {
				if owned || Owned(r.Spec) {
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

// listRules lists a chain's rules, parsed.
func listRules(t Tables, table, chain string) ([]Rule, error) {
	lines, err := t.List(table, chain)
	if err != nil {
		return nil, fmt.Errorf("iptables -t %s -S %s: %w", table, chain, err)
	}
	var rules []Rule
	for _, line := range lines {
		args, err := splitSpec(line)
		if err != nil {
			return nil, fmt.Errorf("iptables -t %s -S %s: %q: %w", table, chain, line, err)
		}
		if len(args) < 2 || args[0] != "-A" {
			continue // -P or -N
		}
		if args[1] != chain {
			return nil, fmt.Errorf("iptables -t %s -S %s: a rule of chain %s in its listing: %q", table, chain, args[1], line)
		}
		rules = append(rules, Rule{Table: table, Chain: chain, Spec: args[2:]})
	}
	return rules, nil
}

// splitSpec splits a line of iptables -S into its arguments: blanks
// separate, double quotes group, a backslash escapes the next character
// inside quotes.
func splitSpec(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, inArg = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

func sortedKeys(m map[[2]string][]Rule) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}

// Contains reports whether the tables hold rule r (its exact spec, in its
// chain).
func Contains(t Tables, r Rule) (bool, error) {
	rules, err := listRules(t, r.Table, r.Chain)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(rules, func(x Rule) bool { return slices.Equal(x.Spec, r.Spec) }), nil
}
