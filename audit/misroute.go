package audit

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// judgeRouting asks the kernel where each live pod's traffic goes, because
// counting rules misses the real harm of #2048: a leaked `to X lookup
// main` rule for an address now on another node sends a secondary ENI's
// pods' traffic to X through the main table (out of the primary ENI, where
// the VPC drops it), and a leaked `from X lookup T` sends a new holder of
// X out of another ENI. Each live, routed pod is checked for traffic to it
// (it must reach its veth) and from it to every probe and every leaked
// rule 512's address: the kernel's answer, rules and all, must be the one
// the pod's own table gives.
func (a *auditor) judgeRouting() error {
	var leakedDsts []netip.Addr
	for _, f := range a.out {
		if f.Class == Leaked && f.remove.rule != nil && ownership.IsToPod(*f.remove.rule, mustAddr(f.Addr)) {
			leakedDsts = append(leakedDsts, mustAddr(f.Addr))
		}
	}
	probes := a.in.Probes
	if probes == nil {
		probes = DefaultProbes
	}
	dsts := append(append([]netip.Addr{}, probes...), leakedDsts...)
	tables := map[int][]kernel.Route{}
	for _, ip := range sortedAddrs(a.v.routed) {
		veth := a.v.routed[ip]
		if st := a.vethLiveness(veth); st != live && st != unknown {
			continue
		}
		if len(a.holders[ip]) == 0 && !a.isBranch(ip) {
			continue // not a pod's for sure: judged as LEAKED or MISSING
		}
		res, err := a.in.Node.RouteGet(kernel.RouteQuery{Dst: net.IP(ip.AsSlice())})
		if err != nil || res.LinkName != veth {
			a.add(Finding{Class: Misroute, Addr: ip.String(), Object: "traffic to " + ip.String(),
				Reason: fmt.Sprintf("goes to %s, not the pod's veth %s%s", orNothing(res.LinkName), veth, errSuffix(err)),
				Show:   "ip " + v6flag(ip) + "route get " + ip.String()})
		}
		table, ok := a.podTable(ip)
		if !ok || a.isBranch(ip) {
			continue // its ENI is not known for sure, or it is a branch pod's VLAN
		}
		if _, read := tables[table]; !read {
			rs, err := a.in.Node.RouteList(kernel.FamilyAll, table)
			if err != nil {
				return fmt.Errorf("list table %s: %w", ownership.TableName(table), err)
			}
			tables[table] = rs
		}
		for _, d := range dsts {
			if d.Is4() != ip.Is4() || d == ip || !a.forwards(ip) {
				continue
			}
			want, ok := longestMatch(tables[table], d)
			if !ok {
				continue // the pod's table has no way there: nothing to compare
			}
			wantLink := a.v.linkName(want.LinkIndex)
			res, err := a.in.Node.RouteGet(kernel.RouteQuery{Dst: net.IP(d.AsSlice()), Src: net.IP(ip.AsSlice()), IifName: veth})
			if err == nil && res.LinkName == wantLink {
				continue
			}
			a.add(Finding{Class: Misroute, Addr: ip.String(), Object: fmt.Sprintf("traffic from %s to %s", ip, d),
				Reason: fmt.Sprintf("leaves via %s, not %s as the pod's table %s routes it%s%s", orNothing(res.LinkName), wantLink,
					ownership.TableName(table), ruleHint(res), errSuffix(err)),
				Show: fmt.Sprintf("ip %sroute get %s from %s iif %s", v6flag(ip), d, ip, veth)})
		}
	}
	return nil
}

// forwards: the node forwards the address family's packets. A lookup as
// if from a pod's veth (iif) fails on a node that does not, whatever its
// rules say, so the probes from pods would each be a false MISROUTE; an
// EKS node always forwards, and where one does not, no pod of it reaches
// anything, which is no one pod's fault.
func (a *auditor) forwards(ip netip.Addr) bool {
	key := "net/ipv4/conf/all/forwarding"
	if ip.Is6() {
		key = "net/ipv6/conf/all/forwarding"
	}
	if on, seen := a.forwarding[key]; seen {
		return on
	}
	v, err := a.in.Node.SysctlGet(key)
	on := err != nil || strings.TrimSpace(v) != "0" // unreadable: probe, and let the kernel answer
	if a.forwarding == nil {
		a.forwarding = map[string]bool{}
	}
	a.forwarding[key] = on
	return on
}

// longestMatch is the route of a table a lookup of d takes: the longest
// prefix holding d, the lowest metric among equals.
func longestMatch(rs []kernel.Route, d netip.Addr) (kernel.Route, bool) {
	best, bestLen, found := kernel.Route{}, -1, false
	for _, r := range rs {
		p := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		if d.Is4() {
			p = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if r.Dst != nil {
			var ok bool
			if p, ok = kernel.Prefix(r.Dst); !ok {
				continue
			}
		} else if r.Family != ownership.Family(d) && r.Family != 0 {
			continue
		}
		if !p.Contains(d) {
			continue
		}
		if p.Bits() > bestLen || (p.Bits() == bestLen && r.Priority < best.Priority) {
			best, bestLen, found = r, p.Bits(), true
		}
	}
	return best, found
}

// podTable is the table of a pod's ENI: ipamd's word when it answered,
// else the pod's own rule 1536 (none: the primary ENI's main); two 1536
// rules and no ipamd leave it unknown.
func (a *auditor) podTable(ip netip.Addr) (int, bool) {
	if t := a.ipamdTable(ip); t != 0 {
		return t, true
	}
	var tables []int
	for _, r := range a.v.rules {
		if _, ok := a.v.scope.Owns(r); ok && ownership.IsFromPod(r, ip) {
			tables = append(tables, r.Table)
		}
	}
	switch len(tables) {
	case 0:
		return kernel.TableMain, true
	case 1:
		return tables[0], true
	}
	return 0, false
}

func ruleHint(res kernel.RouteResult) string {
	if res.Table == 0 {
		return ""
	}
	return fmt.Sprintf(": the lookup took table %s", ownership.TableName(res.Table))
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func orNothing(s string) string {
	if s == "" {
		return "nowhere"
	}
	return s
}

func mustAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}
