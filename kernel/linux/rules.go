package linux

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

// toNLRule maps a rule to netlink's, sending only the fields that are
// set, so that in RuleDel zero fields are the kernel's wildcards:
// netlink.NewRule() leaves Priority at -1 (no FRA_PRIORITY: any priority
// on delete, the kernel's pick on add), Table 0 is RT_TABLE_UNSPEC (any
// table on delete; on add a fresh table for IPv4, EINVAL for IPv6), nil
// Src/Dst and empty names send nothing, Mark and Mask only when non-zero.
// The family is Src's or Dst's, else Family, else IPv4 (netlink's
// default).
func toNLRule(r kernel.Rule) (*netlink.Rule, error) {
	src, dst := noDefault(r.Src), noDefault(r.Dst)
	if src != nil && dst != nil && kernel.FamilyOf(src.IP) != kernel.FamilyOf(dst.IP) {
		return nil, fmt.Errorf("rule from %s to %s mixes families: %w", src, dst, syscall.EINVAL)
	}
	nr := netlink.NewRule()
	if r.Priority != 0 {
		nr.Priority = r.Priority
	}
	nr.Family = int(r.Family)
	switch {
	case src != nil:
		nr.Family = int(kernel.FamilyOf(src.IP))
	case dst != nil:
		nr.Family = int(kernel.FamilyOf(dst.IP))
	case nr.Family == 0:
		nr.Family = unix.AF_INET
	}
	nr.Src, nr.Dst, nr.IifName, nr.OifName, nr.Table = src, dst, r.IifName, r.OifName, r.Table
	nr.Mark = r.Mark
	if r.Mask != 0 {
		m := r.Mask
		nr.Mask = &m
	}
	return nr, nil
}

// noDefault drops a /0 selector: the kernel treats it as none.
func noDefault(n *net.IPNet) *net.IPNet {
	if n == nil || n.IP == nil {
		return nil
	}
	if ones, _ := n.Mask.Size(); ones == 0 {
		return nil
	}
	return n
}

func (h *Handle) ruleOp(r kernel.Rule, op func(*netlink.Rule) error) error {
	nr, err := toNLRule(r)
	if err != nil {
		return err
	}
	return h.use(func() error { return op(nr) })
}

func (h *Handle) RuleAdd(r kernel.Rule) error { return h.ruleOp(r, h.nl.RuleAdd) }
func (h *Handle) RuleDel(r kernel.Rule) error { return h.ruleOp(r, h.nl.RuleDel) }

// RuleList lists the IPv4 and/or IPv6 rules with Table resolved
// (FRA_TABLE) and Family set; the multicast-routing families' rules are
// left out.
func (h *Handle) RuleList(family kernel.Family) (out []kernel.Rule, err error) {
	err = h.use(func() error {
		rs, err := dump(func() ([]netlink.Rule, error) { return h.nl.RuleList(int(family)) })
		for _, r := range rs {
			if r.Family != unix.AF_INET && r.Family != unix.AF_INET6 {
				continue
			}
			k := kernel.Rule{Priority: max(r.Priority, 0), Family: kernel.Family(r.Family), Src: r.Src, Dst: r.Dst,
				IifName: r.IifName, OifName: r.OifName, Table: r.Table, Mark: r.Mark}
			if r.Mask != nil {
				k.Mask = *r.Mask
			}
			out = append(out, k)
		}
		return err
	})
	return out, err
}
