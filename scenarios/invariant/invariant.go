// Package invariant holds what the harness checks after a scenario has
// settled: the property of the project, split into checks that each say
// what they found. "What is checked" lives here and nowhere else.
package invariant

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// Violation kinds.
const (
	Leak         = "LEAK"          // a kernel object of a deleted pod remains
	Broken       = "BROKEN"        // a live pod lacks one of its objects
	Misroute     = "MISROUTE"      // traffic to or from a live pod goes the wrong way
	IPAM         = "IPAM"          // ipamd's allocations differ from the live pods
	DoubleAssign = "DOUBLE-ASSIGN" // one address held by two pods
	Stuck        = "STUCK"         // a deleted pod's sandbox was never removed
	Foreign      = "FOREIGN"       // a rule that was no pod's (another agent's) is gone
	EarlyRelease = "EARLY-RELEASE" // ipamd released an address while kernel objects of it remained
	// AuditDisagrees: the node audit (package audit), run on the same final
	// state from what an operator's tool reads, found something no
	// violation explains, or missed a leak the invariants found.
	AuditDisagrees = "AUDIT-DISAGREES"
)

// Pod is a pod as the harness knows it.
type Pod struct {
	Name        string
	ContainerID string
	IP          netip.Addr
	Device      int
	HostVeth    string
	Netns       string
	// VlanID is set for a branch-ENI pod; Strict is its enforcing mode.
	VlanID int
	Strict bool
}

// Table is the pod's egress table: main on the primary ENI, device+1 on
// another, vlanID+100 on a branch ENI.
func (p Pod) Table() int {
	switch {
	case p.VlanID != 0:
		return ownership.VlanTable(p.VlanID)
	case p.Device == 0:
		return kernel.TableMain
	}
	return p.Device + 1
}

// vlanLink is a branch pod's VLAN link ("" for others).
func (p Pod) vlanLink() string {
	if p.VlanID == 0 {
		return ""
	}
	return ownership.VlanLink(p.VlanID)
}

// hostRouted: the pod is reached through a main-table host route and rule
// 512 (all but strict branch pods, which are reached only from their VLAN).
func (p Pod) hostRouted() bool { return !(p.VlanID != 0 && p.Strict) }

// Allocation is one of ipamd's.
type Allocation struct {
	ContainerID string
	IP          netip.Addr
}

// World is the state to check.
type World struct {
	Node    kernel.API // the node namespace
	Live    []Pod
	Deleted []Pod
	// Pending are pods whose ADD or DEL failed last: the runtime retries
	// their DEL, so their objects are neither required nor a leak yet.
	Pending []Pod
	// Remote holds the addresses now owned by pods on other nodes, each
	// with who holds it ("web-2 on another node").
	Remote map[netip.Addr]string
	// NamespaceExists tells whether a pod namespace is still there.
	NamespaceExists func(path string) bool
	// ENILink names the node link of an ENI device ("eth1").
	ENILink func(device int) string
	// Allocations are ipamd's; nil with IpamdUp false when ipamd is down.
	Allocations []Allocation
	IpamdUp     bool
	// OffVPC are addresses off the node and off the VPC, one per family.
	OffVPC []netip.Addr
	// Foreign are another agent's rules, there before any pod: every one
	// must survive, and none is a pod's leak.
	Foreign []kernel.Rule
	// NAT, when set, are the node's iptables, which must hold NATPlan's
	// aws-node rules and no other (with rule 1024 for NATMark).
	NAT     hostnat.Tables
	NATPlan hostnat.Plan
	NATMark uint32
	// NATForeign are another agent's iptables rules: every one must
	// survive, and none is aws-node's.
	NATForeign []hostnat.Rule
}

// Violation is one finding.
type Violation struct {
	Kind string `json:"kind"`
	What string `json:"what"`
}

func (v Violation) String() string { return v.Kind + ": " + v.What }

// Check runs every check.
func Check(w World) ([]Violation, error) {
	var out []Violation
	for _, c := range []func(World) ([]Violation, error){checkNodeObjects, checkForeign, checkSandboxes, checkRouting, checkIPAM, checkHostNAT} {
		v, err := c(w)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].What < out[j].What
	})
	return out, nil
}

// Severity orders the kinds, most serious first: what is left behind,
// then an address given twice, a sandbox never removed, then what live
// pods suffer; last the validator disagreeing, which says nothing of the
// node but that the two judges differ.
var Severity = []string{Leak, DoubleAssign, EarlyRelease, Foreign, Stuck, Misroute, Broken, IPAM, AuditDisagrees}

// Main is the most serious kind among vs, "" for none.
func Main(vs []Violation) string {
	for _, k := range Severity {
		for _, v := range vs {
			if v.Kind == k {
				return k
			}
		}
	}
	return ""
}

// Kinds lists the distinct kinds of a set of violations, sorted.
func Kinds(vs []Violation) []string {
	seen := map[string]bool{}
	var ks []string
	for _, v := range vs {
		if !seen[v.Kind] {
			seen[v.Kind] = true
			ks = append(ks, v.Kind)
		}
	}
	sort.Strings(ks)
	return ks
}

// owner names who had an address, for attributing a leftover object.
func owner(w World, a netip.Addr) string {
	for _, p := range w.Deleted {
		if p.IP == a {
			return p.Name + ", deleted"
		}
	}
	return "no pod"
}

func toAddr(n *net.IPNet) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	ones, bits := n.Mask.Size()
	a, ok := netip.AddrFromSlice(n.IP)
	return a.Unmap(), ok && ones == bits
}

// checkNodeObjects: every pod-owned object on the node (rules at 10, 512
// and 1536, host routes to /32s via veths, veths) must be explained by a
// live pod; every live pod must have all of its own.
func checkNodeObjects(w World) ([]Violation, error) {
	c := claimsOf(w)
	h := newHeld()
	out, err := checkPodRules(w, c, h)
	if err != nil {
		return nil, err
	}
	links, byIndex, err := checkPodLinks(w, c, h)
	if err != nil {
		return nil, err
	}
	out = append(out, links...)
	routes, err := checkPodRoutes(w, c, byIndex, h)
	if err != nil {
		return nil, err
	}
	out = append(out, routes...)
	return append(out, checkLivePodsComplete(w, h)...), nil
}

// claims are the pods that explain the node's objects, by what they
// claim: a pending pod's are accounted for, but only live pods must have
// theirs.
type claims struct {
	// live: a live pod's claim on an address wins over a pending one's
	// (a lost sandbox whose address was freed and taken again).
	live map[netip.Addr]Pod
	// iifOwner: strict branch pods own two iif rules, their VLAN's and
	// their veth's (two sandboxes of one pod share the veth's name, each
	// its own table).
	iifOwner map[string][]Pod
	// vethOf: the host veths and VLAN links of the pods.
	vethOf map[string]bool
}

func claimsOf(w World) claims {
	explained := append(append([]Pod{}, w.Live...), w.Pending...)
	c := claims{live: map[netip.Addr]Pod{}, iifOwner: map[string][]Pod{}, vethOf: map[string]bool{}}
	for _, p := range slices.Concat(w.Pending, w.Live) {
		c.live[p.IP] = p
	}
	for _, p := range explained {
		if p.VlanID != 0 && p.Strict {
			c.iifOwner[p.vlanLink()] = append(c.iifOwner[p.vlanLink()], p)
			c.iifOwner[p.HostVeth] = append(c.iifOwner[p.HostVeth], p)
		}
	}
	for _, p := range explained {
		c.vethOf[p.HostVeth] = true
		if p.VlanID != 0 {
			c.vethOf[p.vlanLink()] = true
		}
	}
	return c
}

// held is which of their objects the pods were found to have.
type held struct {
	rule512, rule1536 map[netip.Addr]bool
	iif               map[string]bool // link|table
	link              map[string]bool
	route             map[netip.Addr]bool
}

func newHeld() *held {
	return &held{rule512: map[netip.Addr]bool{}, rule1536: map[netip.Addr]bool{}, iif: map[string]bool{},
		link: map[string]bool{}, route: map[netip.Addr]bool{}}
}

// checkPodRules: a rule at 512, 1536 or 10 that no pod explains is a leak
// (another agent's rules are checkForeign's).
func checkPodRules(w World, c claims, h *held) ([]Violation, error) {
	rules, err := w.Node.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	var out []Violation
	for _, r := range rules {
		if ownership.IndexOf(w.Foreign, r) >= 0 {
			continue // another agent's: checkForeign's
		}
		switch r.Priority {
		case ownership.PrioToPod:
			a, ok := toAddr(r.Dst)
			if p, isLive := c.live[a]; ok && isLive && r.Table == kernel.TableMain && r.Src == nil {
				h.rule512[p.IP] = true
				continue
			}
			out = append(out, Violation{Leak, fmt.Sprintf("rule %d to %s lookup %s (%s)", r.Priority, r.Dst, ownership.TableName(r.Table), owner(w, a))})
		case ownership.PrioFromPod:
			a, ok := toAddr(r.Src)
			if p, isLive := c.live[a]; ok && isLive && r.Table == p.Table() && r.Dst == nil {
				h.rule1536[p.IP] = true
				continue
			}
			out = append(out, Violation{Leak, fmt.Sprintf("rule %d from %s lookup %s (%s)", r.Priority, r.Src, ownership.TableName(r.Table), owner(w, a))})
		case ownership.PrioVlanIIF:
			if slices.ContainsFunc(c.iifOwner[r.IifName], func(p Pod) bool { return r.Table == p.Table() }) {
				h.iif[r.IifName+"|"+fmt.Sprint(r.Table)] = true
				continue
			}
			out = append(out, Violation{Leak, fmt.Sprintf("rule %d iif %s lookup %s", r.Priority, r.IifName, ownership.TableName(r.Table))})
		}
	}
	return out, nil
}

// checkPodLinks: a veth or VLAN link that no pod explains is a leak. It
// returns the node's links by index, for checkPodRoutes.
func checkPodLinks(w World, c claims, h *held) ([]Violation, map[int]kernel.Link, error) {
	links, err := w.Node.LinkList()
	if err != nil {
		return nil, nil, err
	}
	var out []Violation
	byIndex := map[int]kernel.Link{}
	for _, l := range links {
		byIndex[l.Index] = l
		if l.Kind != kernel.KindVeth && l.Kind != kernel.KindVlan {
			continue
		}
		if c.vethOf[l.Name] {
			h.link[l.Name] = true
			continue
		}
		out = append(out, Violation{Leak, fmt.Sprintf("link %s (%s)", l.Name, l.Kind)})
	}
	return out, byIndex, nil
}

// checkPodRoutes: a main-table route to a single address through a veth
// is a leak unless it goes to the veth of the pod holding the address.
func checkPodRoutes(w World, c claims, byIndex map[int]kernel.Link, h *held) ([]Violation, error) {
	routes, err := w.Node.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, err
	}
	var out []Violation
	for _, r := range routes {
		a, ok := toAddr(r.Dst)
		l, known := byIndex[r.LinkIndex]
		if !ok || !known || l.Kind != kernel.KindVeth {
			continue
		}
		if p, isLive := c.live[a]; isLive && p.HostVeth == l.Name {
			h.route[a] = true
			continue
		}
		out = append(out, Violation{Leak, fmt.Sprintf("route %s dev %s (%s)", r.Dst, l.Name, owner(w, a))})
	}
	return out, nil
}

// checkLivePodsComplete: a live pod lacking one of its objects is broken.
func checkLivePodsComplete(w World, h *held) []Violation {
	var out []Violation
	for _, p := range w.Live {
		missing := []string{}
		if !h.link[p.HostVeth] {
			missing = append(missing, "host veth "+p.HostVeth)
		}
		if p.VlanID != 0 && !h.link[p.vlanLink()] {
			missing = append(missing, "VLAN link "+p.vlanLink())
		}
		if p.hostRouted() {
			if !h.route[p.IP] {
				missing = append(missing, "host route")
			}
			if !h.rule512[p.IP] {
				missing = append(missing, "rule 512")
			}
			if p.Table() != kernel.TableMain && !h.rule1536[p.IP] {
				missing = append(missing, fmt.Sprintf("rule 1536 lookup %d", p.Table()))
			}
		} else {
			for _, l := range []string{p.vlanLink(), p.HostVeth} {
				if !h.iif[l+"|"+fmt.Sprint(p.Table())] {
					missing = append(missing, fmt.Sprintf("rule 10 iif %s lookup %d", l, p.Table()))
				}
			}
		}
		if len(missing) > 0 {
			out = append(out, Violation{Broken, fmt.Sprintf("%s (%s) lacks %s", p.Name, p.IP, strings.Join(missing, ", "))})
		}
	}
	return out
}

// checkForeign: nothing may remove a rule that was never a pod's.
func checkForeign(w World) ([]Violation, error) {
	if len(w.Foreign) == 0 {
		return nil, nil
	}
	rules, err := w.Node.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	var out []Violation
	for _, f := range w.Foreign {
		if ownership.IndexOf(rules, f) < 0 {
			out = append(out, Violation{Foreign, kernel.RuleString(f) + " (another agent's) was deleted"})
		}
	}
	return out, nil
}

// checkSandboxes: a deleted pod's namespace must be gone.
func checkSandboxes(w World) ([]Violation, error) {
	var out []Violation
	for _, p := range w.Deleted {
		if w.NamespaceExists != nil && w.NamespaceExists(p.Netns) {
			out = append(out, Violation{Stuck, fmt.Sprintf("%s: sandbox namespace %s still exists", p.Name, p.Netns)})
		}
	}
	return out, nil
}

// CheckRouting is the routing check alone (MISROUTE), for a caller that
// narrows the world to what changed: traffic to each of w.Live goes to
// its veth, and from each of them to every address of w.Remote and
// w.OffVPC leaves by its own ENI.
func CheckRouting(w World) []Violation {
	vs, _ := checkRouting(w) // (it has no error of its own to report)
	return vs
}

// checkRouting asks the kernel where traffic goes, because counting rules
// misses the real harm of #2048: a leaked `to X lookup main` rule for an
// address now on another node sends a secondary-ENI pod's traffic to X out
// of the primary ENI, where the VPC drops it.
func checkRouting(w World) ([]Violation, error) {
	var out []Violation
	var dsts []netip.Addr
	for a := range w.Remote {
		dsts = append(dsts, a)
	}
	sort.Slice(dsts, func(i, j int) bool { return dsts[i].Less(dsts[j]) })
	dsts = append(dsts, w.OffVPC...)
	for _, p := range w.Live {
		// A strict branch pod is reached only from its VLAN.
		q := kernel.RouteQuery{Dst: net.IP(p.IP.AsSlice())}
		if !p.hostRouted() {
			// An input lookup needs the packet's source: a client off the
			// VPC (a documentation address when the world names none).
			q.IifName = p.vlanLink()
			client := netip.MustParseAddr("198.51.100.7")
			if p.IP.Is6() {
				client = netip.MustParseAddr("2001:db8:ffff::7")
			}
			for _, a := range w.OffVPC {
				if a.Is4() == p.IP.Is4() {
					client = a
				}
			}
			q.Src = net.IP(client.AsSlice())
		}
		res, err := w.Node.RouteGet(q)
		if err != nil || res.LinkName != p.HostVeth {
			out = append(out, Violation{Misroute, fmt.Sprintf("traffic to %s (%s) goes to %s, not %s (%v)", p.Name, p.IP, res.LinkName, p.HostVeth, err)})
		}
		want := w.ENILink(p.Device)
		if p.VlanID != 0 {
			want = p.vlanLink()
		}
		for _, d := range dsts {
			if d.Is4() != p.IP.Is4() {
				continue
			}
			res, err := w.Node.RouteGet(kernel.RouteQuery{Dst: net.IP(d.AsSlice()), Src: net.IP(p.IP.AsSlice()), IifName: p.HostVeth})
			if err == nil && res.LinkName == want {
				continue
			}
			to := d.String()
			if n, ok := w.Remote[d]; ok {
				to += " (" + n + ")"
			}
			out = append(out, Violation{Misroute, fmt.Sprintf("traffic from %s (%s, device %d) to %s leaves via %s, not %s (rule %d, table %s)",
				p.Name, p.IP, p.Device, to, res.LinkName, want, res.RulePrio, ownership.TableName(res.Table))})
		}
	}
	return out, nil
}

// checkIPAM: ipamd's allocations are exactly the live pods, and no address
// has two holders.
// doubleHolders: no address is held by two live pods, here or one here
// and one on another node.
func doubleHolders(w World) []Violation {
	var out []Violation
	holders := map[netip.Addr][]string{}
	for _, p := range w.Live {
		holders[p.IP] = append(holders[p.IP], p.Name)
	}
	for a, n := range w.Remote {
		holders[a] = append(holders[a], n) // (n says where: "web-2 on another node")
	}
	for a, hs := range holders {
		if len(hs) > 1 {
			sort.Strings(hs)
			out = append(out, Violation{DoubleAssign, fmt.Sprintf("%s held by %s", a, strings.Join(hs, " and "))})
		}
	}
	// In the order of their text (the address first): findings made at one
	// moment read the same in every run of a seed.
	sort.Slice(out, func(i, j int) bool { return out[i].What < out[j].What })
	return out
}

// CheckStep is what must hold after every step of a run, not only once it
// has settled: an address held twice for a moment is a pod's traffic
// misdelivered meanwhile, and an address ipamd released while the kernel
// still has its rules or host route is one the next holder inherits with
// them, even if a reconciler cleans up a minute later. released are the
// addresses ipamd gave back during the step; handed are those of them a
// DEL had handed its veth pair over for, with that veth's ifindex: ipamd
// may release such an address only once the veth is gone (a policy whose
// DEL hands nothing over is held to rules and routes alone).
func CheckStep(w World, released []netip.Addr, handed map[netip.Addr]int) ([]Violation, error) {
	out := doubleHolders(w)
	if len(released) == 0 {
		return out, nil
	}
	held := map[netip.Addr]bool{}
	for _, p := range append(append([]Pod{}, w.Live...), w.Pending...) {
		held[p.IP] = true
	}
	rules, err := w.Node.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, err
	}
	routes, err := w.Node.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, err
	}
	for _, a := range released {
		if held[a] {
			continue // already someone's again: its objects are theirs
		}
		var left []string
		for _, r := range rules {
			if ownership.IndexOf(w.Foreign, r) < 0 && (ownership.IsToPod(r, a) || ownership.IsFromPod(r, a)) {
				left = append(left, kernel.RuleString(r))
			}
		}
		for _, r := range routes {
			if p, ok := kernel.Prefix(r.Dst); ok && p == ownership.HostPrefix(a) {
				left = append(left, "route "+p.String())
			}
		}
		if idx, ok := handed[a]; ok {
			if l, err := w.Node.LinkByIndex(idx); err == nil {
				left = append(left, fmt.Sprintf("link %s (the veth its DEL handed over)", l.Name))
			} else if !kernel.IsNotFound(err) {
				return nil, err
			}
		}
		if len(left) > 0 {
			out = append(out, Violation{EarlyRelease, fmt.Sprintf("%s released while %s remain", a, strings.Join(left, ", "))})
		}
	}
	return out, nil
}

func checkIPAM(w World) ([]Violation, error) {
	out := doubleHolders(w)
	if !w.IpamdUp {
		return out, nil
	}
	byCID := map[string]netip.Addr{}
	seen := map[netip.Addr]int{}
	for _, a := range w.Allocations {
		byCID[a.ContainerID] = a.IP
		seen[a.IP]++
	}
	for a, n := range seen {
		if n > 1 {
			out = append(out, Violation{DoubleAssign, fmt.Sprintf("ipamd assigned %s %d times", a, n)})
		}
	}
	livecid := map[string]bool{}
	for _, p := range w.Live {
		livecid[p.ContainerID] = true
		if p.VlanID != 0 {
			continue // a branch ENI's address is the VPC's, not the pool's
		}
		if ip, ok := byCID[p.ContainerID]; !ok {
			out = append(out, Violation{IPAM, fmt.Sprintf("ipamd has no allocation for live pod %s (%s)", p.Name, p.IP)})
		} else if ip != p.IP {
			out = append(out, Violation{IPAM, fmt.Sprintf("ipamd says %s has %s, the pod has %s", p.Name, ip, p.IP)})
		}
	}
	// A pending pod's sandbox may still hold its address: the runtime
	// retries its DEL, or has lost it and a GC has not run yet.
	for _, p := range w.Pending {
		livecid[p.ContainerID] = true
	}
	for _, a := range w.Allocations {
		if !livecid[a.ContainerID] {
			out = append(out, Violation{IPAM, fmt.Sprintf("ipamd still holds %s for gone sandbox %s", a.IP, a.ContainerID)})
		}
	}
	return out, nil
}
