package audit

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// judgeRules: every rule the ownership rules call a pod's must be
// explained by an allocation or a live pod veth routed its address.
func (a *auditor) judgeRules() {
	for _, r := range a.v.rules {
		sh, ok := a.v.scope.Owns(r)
		branch := false
		if !ok {
			// A standard branch pod's 1536 rule: its VLAN table is no ENI's
			// (the trunk has no rule 32765), so only its shape speaks for it;
			// and its rule 512, which that 1536 rule ties to the VLAN (the
			// tie the teardown itself accepts for a branch address).
			s, isShape := ownership.ShapeOf(r)
			switch {
			case isShape && s.Kind == ownership.KindFromPod && ownership.IsVlanTable(r.Table),
				isShape && s.Kind == ownership.KindToPod && a.isBranch(s.IP):
				sh, ok, branch = s, true, true
			}
		}
		switch {
		case !ok:
			continue // another agent's rule
		case sh.Kind == ownership.KindIIF:
			a.judgeIIF(r, sh.Link)
			continue
		}
		ip := sh.IP
		if len(a.holders[ip]) > 0 || a.routedLive(ip) {
			a.judgeTable(r, sh, ip)
			continue
		}
		f := Finding{Class: Leaked, Addr: ip.String(), Object: kernel.RuleString(r),
			Reason: "no allocation holds the address and no live pod veth is routed to it",
			Show:   fmt.Sprintf("ip %srule show priority %d", v6flag(ip), r.Priority)}
		if !a.allocationsRead() {
			f.Reason = "no live pod veth is routed the address (neither the checkpoint nor ipamd could be read to say who holds it)"
		}
		if a.in.Ipamd != nil && a.in.Ipamd.InPool != nil && !a.in.Ipamd.InPool(ip) {
			f.Reason += "; ipamd's pool no longer has the address: another node may hold it now, and this rule misroutes traffic to it"
		}
		unrouted := a.unroutedVeths()
		switch {
		case branch:
			f.Reason += " (a branch pod's rule: the VLAN table is no ENI's, so --fix leaves it to you)"
		case len(unrouted) > 0:
			// A live pod whose host route is gone looks, from the node,
			// exactly like a gone pod's leftovers: its rules are held by
			// nothing the audit can read (ipamd forgot it, or the
			// checkpoint is unreadable). Removing them would cut the pod
			// off for good; only its namespace could tell.
			f.Reason += fmt.Sprintf("; but %s, of a pod the runtime does not call gone, is routed no address: the rule may be that pod's, so --fix leaves it to you", strings.Join(unrouted, ", "))
		default:
			f.Fixable, f.remove = true, removal{rule: &r}
		}
		a.add(f)
	}
}

// judgeTable: a live pod's 1536 rule into a table other than the one ipamd
// gives its address is left from an earlier holder on another ENI: it
// takes the pod's egress out of the wrong ENI.
func (a *auditor) judgeTable(r kernel.Rule, sh ownership.Shape, ip netip.Addr) {
	if sh.Kind != ownership.KindFromPod || ownership.IsVlanTable(r.Table) {
		return
	}
	want := a.ipamdTable(ip)
	if want == 0 || want == r.Table {
		return
	}
	a.add(Finding{Class: Leaked, Addr: ip.String(), Object: kernel.RuleString(r),
		Reason: fmt.Sprintf("ipamd has the address on the ENI of table %s, not %s: the rule is an earlier holder's", ownership.TableName(want), ownership.TableName(r.Table)),
		Show:   "ip " + v6flag(ip) + "rule show priority 1536", Fixable: true, remove: removal{rule: &r}})
}

// ipamdTable is the table ipamd gives an address (0: not known).
func (a *auditor) ipamdTable(ip netip.Addr) int {
	for _, h := range a.holders[ip] {
		if h.source == "ipamd" && h.Table != 0 {
			return h.Table
		}
	}
	return 0
}

// judgeIIF: a strict branch pod's rule 10 whose link is gone, or whose
// veth's pod the runtime no longer has.
func (a *auditor) judgeIIF(r kernel.Rule, link string) {
	reason := ""
	if _, ok := a.v.links[link]; !ok {
		reason = "its input link " + link + " is gone"
	} else if ownership.IsBranchHostVeth(link) && a.vethLiveness(link) == gone {
		reason = "the runtime has no sandbox of " + link + "'s pod"
	}
	if reason == "" {
		return
	}
	a.add(Finding{Class: Leaked, Object: kernel.RuleString(r), Reason: reason,
		Show: "ip rule show priority 10", Fixable: true, remove: removal{rule: &r}})
}

// judgeLinks: a pod veth whose pod the runtime no longer has and whose
// addresses nobody holds, and a VLAN link no rule uses.
func (a *auditor) judgeLinks() {
	for _, name := range sortedKeys(a.v.veths) {
		l := a.v.veths[name]
		addrs := a.v.vethAddrs[name]
		heldAny := slices.ContainsFunc(addrs, func(ip netip.Addr) bool { return len(a.holders[ip]) > 0 })
		switch st := a.vethLiveness(name); {
		case st == gone && !heldAny:
			a.add(Finding{Class: Leaked, Addr: firstAddr(addrs), Object: "veth " + name + routedSuffix(addrs),
				Reason: "the runtime has no sandbox of its pod and no allocation holds its addresses",
				Show:   "ip link show " + name, Fixable: true, remove: removal{link: name, linkIndex: l.Index}})
		case st == live && len(addrs) == 0 && !ownership.IsBranchHostVeth(name):
			a.add(Finding{Class: Missing, Object: "host route to veth " + name,
				Reason: "the runtime has a ready sandbox of its pod, but no address is routed to the veth: the node cannot reach the pod",
				Show:   "ip link show " + name + "; ip route show dev " + name})
		case !a.allocationsRead():
			// Neither the checkpoint nor ipamd was read: that no allocation
			// holds the veth's addresses is not known.
		case st == live && len(addrs) > 0 && !heldAny && !slices.ContainsFunc(addrs, a.isBranch) && !ownership.IsBranchHostVeth(name):
			a.add(Finding{Class: Missing, Addr: firstAddr(addrs), Object: "allocation of " + strings.Join(addrStrings(addrs), ", "),
				Reason: "a ready sandbox's veth " + name + " is routed the address but no allocation holds it: ipamd may give it to another pod",
				Show:   "ip route show dev " + name + "; the checkpoint"})
		case st == unknown && len(addrs) > 0 && !heldAny && !slices.ContainsFunc(addrs, a.isBranch) && !ownership.IsBranchHostVeth(name):
			a.add(Finding{Class: Leaked, Addr: firstAddr(addrs), Object: "veth " + name + routedSuffix(addrs),
				Reason: "no allocation holds the addresses routed to it: its pod is gone, or a live pod lost its allocation (ask the runtime to tell which; --fix needs its answer)",
				Show:   "ip route show dev " + name})
		}
	}
	used := map[int]bool{}
	for _, r := range a.v.rules {
		used[r.Table] = true
	}
	for _, name := range sortedKeys(a.v.links) {
		id, ok := ownership.VlanLinkID(name)
		if !ok || used[ownership.VlanTable(id)] {
			continue
		}
		a.add(Finding{Class: Leaked, Object: "VLAN link " + name,
			Reason:  fmt.Sprintf("no rule uses its table %d: no branch pod is reached through it", ownership.VlanTable(id)),
			Show:    fmt.Sprintf("ip link show %s; ip rule show table %d", name, ownership.VlanTable(id)),
			Fixable: true, remove: removal{link: name, linkIndex: a.v.links[name].Index}})
	}
}

// judgeHolders: every held address's pod must be live, alone, and have
// its objects.
func (a *auditor) judgeHolders() {
	for _, d := range a.inIpamdConflicts() {
		a.add(d)
	}
	for _, ip := range sortedAddrs(a.holders) {
		hs := a.holders[ip]
		if d, ok := disagree(ip, hs); ok {
			a.add(d)
		}
		h := hs[0]
		veth, routed := a.v.routed[ip]
		st := unknown
		if routed {
			st = a.vethLiveness(veth)
		} else {
			st = a.sandboxLiveness(h.ContainerID)
		}
		switch {
		case st == pending:
		case routed && st == gone, !routed && st != live:
			a.add(Finding{Class: Stray, Addr: ip.String(), Object: "allocation " + describe(h),
				Reason: strayReason(routed, st), Show: "the checkpoint; ip " + v6flag(ip) + "route show " + ip.String()})
		case !routed:
			a.add(Finding{Class: Missing, Addr: ip.String(), Object: "host route to " + ip.String(),
				Reason: "the runtime has a ready sandbox " + shortID(h.ContainerID) + " holding the address, but no pod veth is routed it",
				Show:   "ip " + v6flag(ip) + "route show " + ip.String()})
		case h.PodName != "" && !ownership.HasPodSuffix(veth, h.PodNamespace, h.PodName):
			a.add(Finding{Class: Double, Addr: ip.String(), Object: "route " + ip.String() + " dev " + veth,
				Reason: fmt.Sprintf("routed to %s, which is not %s/%s's veth, while the %s gives the address to %s",
					veth, h.PodNamespace, h.PodName, h.source, describe(h)),
				Show: "ip " + v6flag(ip) + "route show " + ip.String()})
		default:
			a.judgeMissingRules(ip, veth)
		}
	}
}

func strayReason(routed bool, st liveness) string {
	switch {
	case routed:
		return "its veth is still routed the address but the runtime has no sandbox of its pod: the address is held for ever"
	case st == gone:
		return "the runtime has no such sandbox and no pod veth is routed the address: the address is held for ever"
	}
	return "no pod veth is routed the address: its pod is gone and the address is held for ever"
}

// judgeMissingRules: a live, allocated, routed pod lacks its rule 512, or
// its rule 1536 into the table ipamd gives it.
func (a *auditor) judgeMissingRules(ip netip.Addr, veth string) {
	if ownership.IsBranchHostVeth(veth) || a.isBranch(ip) {
		return
	}
	has512, tables := false, []int{}
	for _, r := range a.v.rules {
		if ownership.IsToPod(r, ip) {
			has512 = true
		}
		if ownership.IsFromPod(r, ip) {
			tables = append(tables, r.Table)
		}
	}
	if !has512 {
		a.add(Finding{Class: Missing, Addr: ip.String(), Object: kernel.RuleString(ownership.ToPodRule(ip)),
			Reason: "the pod is live (its veth is routed the address) and allocated, but its rule 512 is gone",
			Show:   "ip " + v6flag(ip) + "rule show priority 512"})
	}
	if t := a.ipamdTable(ip); t != 0 && t != kernel.TableMain && !slices.Contains(tables, t) {
		a.add(Finding{Class: Missing, Addr: ip.String(), Object: kernel.RuleString(ownership.FromPodRule(ip, t)),
			Reason: "the pod is live and ipamd has its address on the ENI of table " + ownership.TableName(t) + ", but its rule 1536 is gone",
			Show:   "ip " + v6flag(ip) + "rule show priority 1536"})
	}
}

// disagree: an address one source lists twice (two sandboxes), or the
// checkpoint and ipamd name different pods for.
func disagree(ip netip.Addr, hs []held) (Finding, bool) {
	for _, h := range hs[1:] {
		h0 := hs[0]
		switch {
		case h.source == h0.source && h.ContainerID != h0.ContainerID:
			return Finding{Class: Double, Addr: ip.String(), Object: "address " + ip.String(),
				Reason: fmt.Sprintf("the %s gives it to %s and to %s", h.source, describe(h0), describe(h)),
				Show:   showSource(h.source)}, true
		case h.source != h0.source && h.PodName != "" && h0.PodName != "" && (h.PodNamespace != h0.PodNamespace || h.PodName != h0.PodName):
			return Finding{Class: Double, Addr: ip.String(), Object: "address " + ip.String(),
				Reason: fmt.Sprintf("the %s gives it to %s and the %s to %s", h0.source, describe(h0), h.source, describe(h)),
				Show:   "the checkpoint; " + showSource("ipamd")}, true
		}
	}
	return Finding{}, false
}

func showSource(source string) string {
	if source == "ipamd" {
		return "curl 127.0.0.1:61679/v1/enis"
	}
	return "the checkpoint"
}

func (a *auditor) inIpamdConflicts() []Finding {
	if a.in.Ipamd == nil {
		return nil
	}
	var out []Finding
	for _, c := range a.in.Ipamd.Conflicts {
		out = append(out, Finding{Class: Double, Object: "ipamd's ENIs", Reason: c, Show: "curl 127.0.0.1:61679/v1/enis"})
	}
	return out
}

func describe(h held) string {
	pod := "no pod recorded"
	if h.PodName != "" {
		pod = h.PodNamespace + "/" + h.PodName
	}
	return fmt.Sprintf("%s (%s)", shortID(h.ContainerID), pod)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
