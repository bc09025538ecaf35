package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// Agreement between the node audit and the invariants. The audit is sound
// when every finding is explained by a violation of the cell: that is what
// makes vpccni-audit --fix safe, since it removes only what it finds, and
// it means a cell the invariants call clean has no finding. It is
// complete, for what the kernel shows, when every #2048 leak the
// invariants find (a deleted pod's rule 512 or 1536) is among its
// findings. Violations carry their objects only as text, so the two are
// matched by the addresses and link names both mention.

// judged is what the audit's findings are compared with.
type judged struct {
	vs []invariant.Violation
	w  invariant.World // the world the invariants judged
	// checkpointCut: a failpoint stopped one of ipamd's calls between its
	// change in memory and its checkpoint write, and ipamd ran on.
	checkpointCut bool
}

// explainedBy are the invariant kinds that may explain each audit class.
var explainedBy = map[audit.Class][]string{
	// An object nothing holds: a leak; or an early release (ipamd gave the
	// address back with its objects left); or an IPAM error (the object
	// is of an address ipamd released or holds wrongly); or a sandbox the
	// runtime lost and no GC collected (STUCK: the runtime no longer
	// lists it, so the audit calls its objects a gone pod's).
	audit.Leaked: {invariant.Leak, invariant.EarlyRelease, invariant.IPAM, invariant.Stuck},
	// An allocation of a gone pod: IPAM, or a lost sandbox's (STUCK).
	audit.Stray: {invariant.IPAM, invariant.Stuck},
	// An address held twice, or held by one pod and routed to another.
	audit.Double: {invariant.DoubleAssign, invariant.IPAM},
	// A live pod's object missing is BROKEN; its allocation missing, IPAM;
	// its host route gone because another pod's route took its address,
	// MISROUTE (traffic to it goes to the other veth).
	audit.Missing: {invariant.Broken, invariant.IPAM, invariant.Misroute},
	// Traffic the wrong way: MISROUTE, or BROKEN when the pod's own object
	// that would route it is gone.
	audit.Misroute: {invariant.Misroute, invariant.Broken},
}

// agree returns the disagreements (AUDIT-DISAGREES) between the audit's
// findings fs and the cell's violations.
func agree(fs []audit.Finding, j judged) []invariant.Violation {
	var out []invariant.Violation
	vsub := make([]subject, len(j.vs))
	for i, v := range j.vs {
		vsub[i] = violationSubject(v, j.w)
	}
	for _, f := range fs {
		if !explained(f, j, vsub) {
			out = append(out, invariant.Violation{Kind: invariant.AuditDisagrees,
				What: fmt.Sprintf("the audit finds %s, which no %s violation explains", f, strings.Join(explainedBy[f.Class], "/"))})
		}
	}
	for _, v := range j.vs {
		a, prio, ok := leakedPodRule(v, j.w)
		if !ok {
			continue
		}
		// The rule itself must be LEAKED, so that --fix removes it. An
		// allocation still holding the address makes the audit call it
		// STRAY instead (the rules are the holder's until ipamd lets it go,
		// then LEAKED): that too names the address to the operator.
		if !slices.ContainsFunc(fs, func(f audit.Finding) bool {
			return f.Addr == a.String() && (f.Class == audit.Stray ||
				f.Class == audit.Leaked && strings.HasPrefix(f.Object, fmt.Sprintf("rule %d:", prio)))
		}) {
			out = append(out, invariant.Violation{Kind: invariant.AuditDisagrees,
				What: fmt.Sprintf("the invariants find %q but the audit does not report that rule %d of %s LEAKED", v.What, prio, a)})
		}
	}
	return out
}

// explained: a violation of a kind that can explain f is about f's address
// or link (any such violation, for a finding about neither); or f is one
// of the two things the audit rightly sees that the invariants do not
// look at: a misroute toward a broken or leaked address (misrouteDst), a
// checkpoint a cut write left behind ipamd's memory (checkpointLags).
func explained(f audit.Finding, j judged, vsub []subject) bool {
	if checkpointLags(f, j) || checkpointOnly(f, j) || leftForUnroutedPod(f, j, vsub) {
		return true
	}
	keys, kinds := findingKeys(f), explainedBy[f.Class]
	for i, v := range j.vs {
		if slices.Contains(kinds, v.Kind) && (keys.empty() || keys.meets(vsub[i])) {
			return true
		}
		if f.Class == audit.Misroute && slices.Contains([]string{invariant.Leak, invariant.Misroute, invariant.Broken}, v.Kind) &&
			misrouteDst(f).meets(vsub[i]) {
			return true
		}
	}
	return false
}

// misrouteDst is the destination of a MISROUTE of traffic from a pod
// ("traffic from X to D"). The audit asks the kernel the way from every
// live pod to every address of a rule 512 it calls leaked; the invariants
// only to addresses other nodes hold now and off the VPC. A pod's traffic
// to D taken out of the wrong ENI by D's rule is the harm of what is wrong
// with D: its LEAK (a deleted pod's rule), or, when D is a live pod whose
// host route is gone, its BROKEN or MISROUTE.
func misrouteDst(f audit.Finding) subject {
	s := subject{addrs: map[netip.Addr]bool{}}
	for a := range subjectOf(f.Object).addrs {
		if a.String() != f.Addr {
			s.addrs[a] = true
		}
	}
	return s
}

// checkpointLags: a STRAY ALLOCATION that only the checkpoint has, after a
// failpoint cut ipamd's checkpoint write of a release short while ipamd
// ran on. ipamd's memory, which the invariants judge, no longer holds the
// address; the file, which ipamd would restore from, still does. The
// audit rightly reports the file; the invariants never read it. Without
// such a cut write, a file that lags ipamd's memory is a finding no
// violation explains: ipamd must write what it changed.
func checkpointLags(f audit.Finding, j judged) bool {
	if f.Class != audit.Stray || !j.checkpointCut || !j.w.IpamdUp {
		return false
	}
	return !slices.ContainsFunc(j.w.Allocations, func(a invariant.Allocation) bool { return a.IP.String() == f.Addr })
}

// checkpointOnly: a STRAY ALLOCATION read from the checkpoint while ipamd
// is down, of a sandbox that is neither live nor pending. The invariants
// judge ipamd's allocations only while it runs; the file is what it will
// restore, and the audit rightly reports an entry whose pod is gone.
func checkpointOnly(f audit.Finding, j judged) bool {
	if f.Class != audit.Stray || j.w.IpamdUp {
		return false
	}
	// The object is "allocation <container ID> (<pod>)".
	words := strings.Fields(f.Object)
	if len(words) < 2 {
		return false
	}
	return !slices.ContainsFunc(slices.Concat(j.w.Live, j.w.Pending), func(p invariant.Pod) bool {
		return p.ContainerID != "" && strings.HasPrefix(p.ContainerID, words[1])
	})
}

// leftForUnroutedPod: a LEAKED rule the audit will not fix because a
// ready pod's veth is routed no address (the rule may be that pod's),
// while the invariants find that pod BROKEN. From the node the two are
// the same picture; the audit says so and leaves the rule alone, which is
// what keeps --fix from cutting the pod off for good.
func leftForUnroutedPod(f audit.Finding, j judged, vsub []subject) bool {
	if f.Class != audit.Leaked || f.Fixable || !strings.Contains(f.Reason, "may be that pod's") {
		return false
	}
	veths := subject{names: map[string]bool{}}
	for n := range subjectOf(f.Reason).names {
		if ownership.IsHostVeth(n, []string{ownership.DefaultVethPrefix}) {
			veths.names[n] = true
		}
	}
	for i, v := range j.vs {
		if v.Kind == invariant.Broken && veths.meets(vsub[i]) {
			return true
		}
	}
	return false
}

// leakedPodRule: v is a LEAK of a deleted pod's rule 512 or 1536 whose
// address no live or pending pod of this node holds now; its address and
// priority. A live or pending holder makes the rule its own (or a
// wrong-table 1536 the audit judges only with ipamd's word on the table),
// so the audit owes no LEAKED for it; an address another node holds now
// is no exception: that is #2048's harm.
func leakedPodRule(v invariant.Violation, w invariant.World) (netip.Addr, int, bool) {
	if v.Kind != invariant.Leak || !strings.HasSuffix(v.What, ", deleted)") {
		return netip.Addr{}, 0, false
	}
	for _, c := range []struct {
		prio int
		sel  string
	}{{ownership.PrioToPod, "to"}, {ownership.PrioFromPod, "from"}} {
		rest, ok := strings.CutPrefix(v.What, fmt.Sprintf("rule %d %s ", c.prio, c.sel))
		if !ok {
			continue
		}
		a, ok := addrOf(strings.Fields(rest)[0])
		if !ok || slices.ContainsFunc(slices.Concat(w.Live, w.Pending), func(p invariant.Pod) bool { return p.IP == a }) {
			return netip.Addr{}, 0, false
		}
		return a, c.prio, true
	}
	return netip.Addr{}, 0, false
}

// subject is what a finding or violation is about: the addresses and the
// names (links, sandboxes) it mentions.
type subject struct {
	addrs map[netip.Addr]bool
	names map[string]bool
}

func (s subject) empty() bool { return len(s.addrs)+len(s.names) == 0 }

func (s subject) meets(o subject) bool {
	for a := range s.addrs {
		if o.addrs[a] {
			return true
		}
	}
	for n := range s.names {
		if o.names[n] {
			return true
		}
	}
	return false
}

// subjectOf reads the addresses (an address, or a host prefix) and the
// other words of a text.
func subjectOf(text string) subject {
	s := subject{addrs: map[netip.Addr]bool{}, names: map[string]bool{}}
	for _, w := range strings.FieldsFunc(text, func(c rune) bool { return strings.ContainsRune(" \t(),;\"", c) }) {
		if a, ok := addrOf(w); ok {
			s.addrs[a] = true
		} else {
			s.names[strings.TrimSuffix(w, ":")] = true
		}
	}
	return s
}

// violationSubject is subjectOf the text, and for a sandbox it names by
// container ID (a lost sandbox's STUCK) or pod name (a BROKEN pod, a
// misrouted one), that sandbox's address and veth.
func violationSubject(v invariant.Violation, w invariant.World) subject {
	s := subjectOf(v.What)
	for _, p := range slices.Concat(w.Live, w.Pending, w.Deleted) {
		if p.ContainerID != "" && s.names[p.ContainerID] || s.names[p.Name] {
			if p.IP.IsValid() {
				s.addrs[p.IP] = true
			}
			s.names[p.HostVeth] = true
		}
	}
	return s
}

func addrOf(w string) (netip.Addr, bool) {
	for _, t := range []string{w, strings.TrimSuffix(w, ":")} {
		if a, err := netip.ParseAddr(t); err == nil {
			return a.Unmap(), true
		}
		if p, err := netip.ParsePrefix(t); err == nil && p.IsSingleIP() {
			return p.Addr().Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// findingKeys: a finding is about its address when it has one; else about
// the links its object names (a rule 10's iif, a VLAN link, a veth with no
// address routed) and the addresses its reason names (ipamd's conflicts).
func findingKeys(f audit.Finding) subject {
	if a, err := netip.ParseAddr(f.Addr); err == nil {
		return subject{addrs: map[netip.Addr]bool{a.Unmap(): true}}
	}
	s := subject{addrs: subjectOf(f.Reason).addrs, names: map[string]bool{}}
	for n := range subjectOf(f.Object).names {
		if ownership.IsHostVeth(n, []string{ownership.DefaultVethPrefix, ownership.StrictVethPrefix}) {
			s.names[n] = true
		} else if _, ok := ownership.VlanLinkID(n); ok {
			s.names[n] = true
		}
	}
	return s
}
