package ownership

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/kernel"
)

// Scope is the word of the node (and, when it can be asked, of ipamd's
// pool) on which addresses and tables are this node's pods'. Every remover
// of a 512 or 1536 rule asks it: the plugin's teardown with the node alone
// (ipamd may be gone), GC and the reconciler with the pool too.
type Scope struct {
	Node *Node
	// InPool, when set, is ipamd's pool: the address is one it hands to
	// pods (an ENI's secondary address, or one of a delegated prefix).
	InPool func(netip.Addr) bool
}

// PodTables is Node.PodTables, narrowed by the pool when it is known.
func (s Scope) PodTables(a netip.Addr) ([]int, error) {
	tables, err := s.Node.PodTables(a)
	if err != nil {
		return nil, err
	}
	if s.InPool != nil && !s.InPool(a) {
		return nil, fmt.Errorf("%s is not in ipamd's pool", a)
	}
	return tables, nil
}

// Owns says whether r is a pod rule of this node that a remover may take:
// the exact shape of one (ShapeOf), for an address the scope gives to pods,
// and for a 1536 rule, in a table of one of the ENIs whose subnet holds
// that address. A prio-10 iif rule is keyed by a link name, not an
// address: its shape is all the scope can say (its remover checks the
// link is gone).
func (s Scope) Owns(r kernel.Rule) (Shape, bool) {
	sh, ok := ShapeOf(r)
	if !ok || sh.Kind == KindIIF {
		return sh, ok
	}
	tables, err := s.PodTables(sh.IP)
	if err != nil {
		return Shape{}, false
	}
	if sh.Kind == KindFromPod && !slices.Contains(tables, r.Table) {
		return Shape{}, false
	}
	return sh, true
}
