package hostnat

import (
	"fmt"
	"slices"
	"sync"
)

// MemTables is iptables in memory, for the kernel model: the scenario
// harness gives it to ipamd in place of the real tables and checks what
// it holds. It keeps rules as given (iptables would print them in its own
// order; PlanFor already writes them so) and answers errors where
// iptables fails: a missing chain, a chain that exists, a rule that is
// not there, a chain still referenced or not empty.
type MemTables struct {
	mu     sync.Mutex
	tables map[string]*memTable
	// NoRandomFully makes it answer as an iptables without --random-fully.
	NoRandomFully bool
	changes       uint64 // Generation
}

// Generation counts the calls that may have changed the tables: two
// reads that agree mean nothing changed in between (ipamd skips a host
// NAT check over tables, kernel and pool unchanged since one that
// passed).
func (m *MemTables) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes
}

type memTable struct {
	chains map[string][][]string
	user   []string // user chains, in creation order
}

// memBuiltins are the built-in chains of the tables hostnat uses.
var memBuiltins = map[string][]string{
	NAT:      {PreRouting, "INPUT", "OUTPUT", PostRouting},
	Mangle:   {PreRouting, "INPUT", "FORWARD", "OUTPUT", PostRouting},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
}

// NewMemTables returns tables with their built-in chains, empty.
func NewMemTables() *MemTables {
	m := &MemTables{tables: map[string]*memTable{}}
	for name, chains := range memBuiltins {
		t := &memTable{chains: map[string][][]string{}}
		for _, c := range chains {
			t.chains[c] = nil
		}
		m.tables[name] = t
	}
	return m
}

func (m *MemTables) table(name string) (*memTable, error) {
	t, ok := m.tables[name]
	if !ok {
		return nil, fmt.Errorf("can't initialize iptables table `%s': Table does not exist", name)
	}
	return t, nil
}

func (m *MemTables) chain(table, chain string) (*memTable, error) {
	t, err := m.table(table)
	if err != nil {
		return nil, err
	}
	if _, ok := t.chains[chain]; !ok {
		return nil, fmt.Errorf("iptables: No chain/target/match by that name (-t %s %s)", table, chain)
	}
	return t, nil
}

func (t *memTable) builtin(table, chain string) bool {
	return slices.Contains(memBuiltins[table], chain)
}

// ListChains lists the built-in chains, then the others.
func (m *MemTables) ListChains(table string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(table)
	if err != nil {
		return nil, err
	}
	return slices.Concat(memBuiltins[table], t.user), nil
}

// List answers as iptables -S CHAIN.
func (m *MemTables) List(table, chain string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.chain(table, chain)
	if err != nil {
		return nil, err
	}
	head := "-N " + chain
	if t.builtin(table, chain) {
		head = "-P " + chain + " ACCEPT"
	}
	out := []string{head}
	for _, spec := range t.chains[chain] {
		out = append(out, "-A "+chain+" "+quoteSpec(spec))
	}
	return out, nil
}

func (m *MemTables) ChainExists(table, chain string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(table)
	if err != nil {
		return false, err
	}
	_, ok := t.chains[chain]
	return ok, nil
}

func (m *MemTables) NewChain(table, chain string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes++
	t, err := m.table(table)
	if err != nil {
		return err
	}
	if _, ok := t.chains[chain]; ok {
		return fmt.Errorf("iptables: Chain already exists (-t %s -N %s)", table, chain)
	}
	t.chains[chain] = nil
	t.user = append(t.user, chain)
	return nil
}

// ClearChain empties a chain, making it when missing (as go-iptables).
func (m *MemTables) ClearChain(table, chain string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes++
	t, err := m.table(table)
	if err != nil {
		return err
	}
	if _, ok := t.chains[chain]; !ok {
		t.user = append(t.user, chain)
	}
	t.chains[chain] = nil
	return nil
}

func (m *MemTables) DeleteChain(table, chain string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes++
	t, err := m.chain(table, chain)
	if err != nil {
		return err
	}
	if t.builtin(table, chain) {
		return fmt.Errorf("iptables: Can't delete built-in chain %s", chain)
	}
	if len(t.chains[chain]) > 0 {
		return fmt.Errorf("iptables: Directory not empty (-t %s -X %s)", table, chain)
	}
	for c, rules := range t.chains {
		for _, r := range rules {
			if n := len(r); n >= 2 && r[n-2] == "-j" && r[n-1] == chain {
				return fmt.Errorf("iptables: Too many links (-t %s -X %s: %s jumps to it)", table, chain, c)
			}
		}
	}
	delete(t.chains, chain)
	t.user = slices.DeleteFunc(t.user, func(c string) bool { return c == chain })
	return nil
}

func (m *MemTables) Append(table, chain string, rulespec ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes++
	t, err := m.chain(table, chain)
	if err != nil {
		return err
	}
	if n := len(rulespec); n >= 2 && rulespec[n-2] == "-j" {
		if _, ok := t.chains[rulespec[n-1]]; !ok && !isTarget(rulespec[n-1]) {
			return fmt.Errorf("iptables: Couldn't load target `%s'", rulespec[n-1])
		}
	}
	t.chains[chain] = append(t.chains[chain], slices.Clone(rulespec))
	return nil
}

// isTarget: the targets hostnat's rules use that are not chains.
func isTarget(s string) bool {
	return slices.Contains([]string{"RETURN", "ACCEPT", "DROP", "SNAT", "MASQUERADE", "CONNMARK", "MARK"}, s)
}

// Delete deletes the first rule equal to rulespec.
func (m *MemTables) Delete(table, chain string, rulespec ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes++
	t, err := m.chain(table, chain)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(t.chains[chain], func(r []string) bool { return slices.Equal(r, rulespec) })
	if i < 0 {
		return fmt.Errorf("iptables: Bad rule (does a matching rule exist in that chain?) (-t %s -D %s %s)", table, chain, quoteSpec(rulespec))
	}
	t.chains[chain] = slices.Delete(t.chains[chain], i, i+1)
	return nil
}

// HasRandomFully answers as go-iptables does.
func (m *MemTables) HasRandomFully() bool { return !m.NoRandomFully }
