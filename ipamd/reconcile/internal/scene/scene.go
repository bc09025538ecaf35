package scene

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// World is a node namespace and a way to make pod namespaces beside it.
type World struct {
	Node     kernel.API
	NewPodNS func() (kernel.API, error)
}

// Prepare readies the node as ipamd finds it: lo up, IPv6 on, and two
// ENIs (bridges stand in for them: the model and Linux both make bridges
// without hardware). eth0 is the primary ENI as the OS leaves it: its
// address in 10.0.1.0/24 and in the /64 of the delegated prefix, and the
// default routes. eth1 is a secondary ENI as ipamd configures it: its
// address in 10.0.2.0/24 and rule 32765 to its table, 2. These are what
// tell ownership.Node which addresses and tables are pods'.
func (w World) Prepare() error {
	eni := func(name, addr string) func() error {
		return func() error {
			l, err := w.Node.LinkByName(name)
			if err != nil {
				return err
			}
			return w.Node.AddrAdd(l.Index, Net(addr)) // the address, not the network, with the prefix's length
		}
	}
	route := func(gw string, fam kernel.Family) func() error {
		return func() error {
			l, err := w.Node.LinkByName("eth0")
			if err != nil {
				return err
			}
			return w.Node.RouteAdd(kernel.Route{Gw: net.ParseIP(gw), LinkIndex: l.Index, Family: fam})
		}
	}
	for _, step := range []func() error{
		func() error { return w.Node.SysctlSet("net/ipv6/conf/all/disable_ipv6", "0") },
		func() error { return w.Node.LinkSetUp("lo") },
		func() error { return w.Node.AddBridge("eth0", 9001) },
		func() error { return w.Node.LinkSetUp("eth0") },
		func() error { return w.Node.AddBridge("eth1", 9001) },
		func() error { return w.Node.LinkSetUp("eth1") },
		eni("eth0", "10.0.1.10/24"),
		eni("eth0", "2600:1f14:1:1:8000::a/64"),
		eni("eth1", "10.0.2.10/24"),
		route("10.0.1.1", kernel.FamilyV4),
		route("fe80::1", kernel.FamilyV6),
		func() error {
			return w.Node.RuleAdd(kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: Net("10.0.2.10/32"), Table: 2})
		},
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// Pod makes what the plugin makes for a live pod on the node side: the
// host veth prefix+hash(ns/name) (its peer is eth0 in a pod namespace of
// its own), up, and its main-table host route; rules 512 and (off the main
// table) 1536 when withRules. It returns the host veth's name.
func (w World) Pod(prefix, ns, name string, ip netip.Addr, table int, withRules bool) (string, error) {
	hv := ownership.HostVeth(prefix, ns, name)
	pod, err := w.NewPodNS()
	if err != nil {
		return "", err
	}
	if err := pod.AddVeth(kernel.VethSpec{Name: "eth0", MTU: 9001, PeerName: hv, PeerNamespace: w.Node}); err != nil {
		return "", fmt.Errorf("veth %s: %w", hv, err)
	}
	if err := pod.LinkSetUp("eth0"); err != nil {
		return "", err
	}
	if err := w.Node.LinkSetUp(hv); err != nil {
		return "", err
	}
	l, err := w.Node.LinkByName(hv)
	if err != nil {
		return "", err
	}
	route := kernel.Route{Dst: Host(ip), LinkIndex: l.Index, Scope: kernel.ScopeLink}
	if ip.Is6() {
		route.Scope = kernel.ScopeUniverse
	}
	if err := w.Node.RouteAdd(route); err != nil {
		return "", fmt.Errorf("route %s dev %s: %w", ip, hv, err)
	}
	if !withRules {
		return hv, nil
	}
	rules := []kernel.Rule{ToPod(ip)}
	if table != kernel.TableMain {
		rules = append(rules, FromPod(ip, table))
	}
	return hv, w.Rules(rules...)
}

// index is a node link's ifindex (0 when it is not there).
func (w World) index(name string) int {
	l, err := w.Node.LinkByName(name)
	if err != nil {
		return 0
	}
	return l.Index
}

// Rules adds rules in order (order matters: a rule goes after the rules
// of its priority already there).
func (w World) Rules(rs ...kernel.Rule) error {
	for _, r := range rs {
		if err := w.Node.RuleAdd(r); err != nil {
			return fmt.Errorf("add %s: %w", kernel.RuleString(r), err)
		}
	}
	return nil
}

// Host is ip's host prefix, IPv4 in its 4-byte form.
func Host(ip netip.Addr) *net.IPNet { return ownership.IPNet(ownership.HostPrefix(ip)) }

// Net parses a prefix (its address kept as written, not masked), IPv4 in
// its 4-byte form.
func Net(s string) *net.IPNet { return ownership.IPNet(netip.MustParsePrefix(s)) }

// ToPod is the plugin's `512: to <ip> lookup main`.
func ToPod(ip netip.Addr) kernel.Rule {
	return kernel.Rule{Priority: ownership.PrioToPod, Family: ownership.Family(ip), Dst: Host(ip), Table: kernel.TableMain}
}

// FromPod is the plugin's `1536: from <ip> lookup <table>`.
func FromPod(ip netip.Addr, table int) kernel.Rule {
	return kernel.Rule{Priority: ownership.PrioFromPod, Family: ownership.Family(ip), Src: Host(ip), Table: table}
}

// IIF is the branch path's `10: iif <link> lookup <table>`.
func IIF(f kernel.Family, link string, table int) kernel.Rule {
	return kernel.Rule{Priority: ownership.PrioVlanIIF, Family: f, IifName: link, Table: table}
}

// Addr parses an address.
func Addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Case is a built node and what a correct pass must do to it, and only
// that.
type Case struct {
	Pool     *Pool
	Now      time.Time
	Removed  []string // rules (kernel.RuleString) the pass deletes
	Released []string // holder IDs the pass releases
	Skipped  []string // Skip.What of what the pass must leave, with a reason
	Counts   map[reconcile.Kind]int
	// Live is what Rebuild(VethPrefixes) must read back: the live pods
	// on pool addresses, the forgotten one included.
	Live         []reconcile.Recovered
	VethPrefixes []string
}

// Pool ranges: the primary ENI's and a secondary ENI's addresses, and an
// IPv6 delegated prefix.
var Ranges = []string{"10.0.1.0/24", "10.0.2.0/24", "2600:1f14:1:1::/80"}

// ForeignRules builds the node the reconciler is judged on: live pods
// (one the pool forgot), allocations young, old, gone, recovered and
// confused, a cooling address, orphan rules of both families and of gone
// branch pods, and foreign rules at ipamd's own priorities that must all
// survive (a /24, a non-pool source, table local, extra selectors, a VLAN
// table for a link of the wrong VLAN, one listed where a delete of an
// orphan would hit it).
func ForeignRules(w World, now time.Time) (*Case, error) {
	if err := w.Prepare(); err != nil {
		return nil, err
	}
	c := &Case{Pool: NewPool(Ranges...), Now: now}
	old, young := now.Add(-10*time.Minute), now.Add(-5*time.Second)
	hold := func(id, ns, name, veth, ip string, since time.Time) {
		c.Pool.Hold(reconcile.Holder{ID: id, IP: Addr(ip), PodNamespace: ns, PodName: name, HostVeth: veth, Since: since})
	}

	// Live pods, each with its allocation, except forgot-0, which the pool
	// lost (a lost checkpoint) and whose rules must stay all the same.
	type pod struct {
		prefix, name, ip string
		table            int
		held             bool
	}
	for _, p := range []pod{
		{"eni", "web-0", "10.0.1.11", kernel.TableMain, true},
		{"eni", "web-1", "10.0.2.11", 2, true},
		{"eni", "web-6", "2600:1f14:1:1::11", kernel.TableMain, true},
		{"veth", "forgot-0", "10.0.2.12", 2, false},
		{"eni", "new-0", "10.0.1.13", kernel.TableMain, false},
	} {
		hv, err := w.Pod(p.prefix, "default", p.name, Addr(p.ip), p.table, true)
		if err != nil {
			return nil, err
		}
		c.Live = append(c.Live, reconcile.Recovered{IP: Addr(p.ip), HostVeth: hv, HostVethIndex: w.index(hv), Table: p.table})
		if p.held {
			hold(p.name, "default", p.name, "", p.ip, old)
		}
	}
	// A live allocation recovered from the kernel (no pod name).
	recLive, err := w.Pod("eni", "default", "rec-1", Addr("10.0.1.41"), kernel.TableMain, true)
	if err != nil {
		return nil, err
	}
	hold("rec-1", "", "", recLive, "10.0.1.41", old)
	c.Live = append(c.Live, reconcile.Recovered{IP: Addr("10.0.1.41"), HostVeth: recLive, HostVethIndex: w.index(recLive), Table: kernel.TableMain})
	slices.SortFunc(c.Live, func(a, b reconcile.Recovered) int { return a.IP.Compare(b.IP) })
	c.VethPrefixes = []string{"eni", "veth", ownership.StrictVethPrefix}
	// A live strict branch pod: its host veth and its iif rules (its
	// address is the branch ENI's, not the pool's), and a live VLAN link
	// (a bridge by that name stands in for it: only the name counts).
	sg0, err := w.Pod(ownership.StrictVethPrefix, "default", "sg-0", Addr("10.9.0.5"), 105, false)
	if err != nil {
		return nil, err
	}
	if err := w.Node.AddBridge("vlan.eth.8", 9001); err != nil {
		return nil, err
	}
	sgGone := ownership.HostVeth(ownership.StrictVethPrefix, "default", "sg-gone")
	v4, v6 := kernel.FamilyV4, kernel.FamilyV6

	// Allocations whose pod is gone: old ones are released with their
	// rules; a young one is an ADD in progress; stale-0's address is
	// routed to another pod (new-0) and stays; unknown-0 names nothing the
	// kernel can confirm.
	hold("gone-0", "default", "gone-0", "", "10.0.2.30", old)
	hold("gone-6", "default", "gone-6", "", "2600:1f14:1:1::30", old)
	hold("rec-0", "", "", ownership.HostVeth("eni", "default", "rec-0"), "10.0.1.40", old)
	hold("young-0", "default", "young-0", "", "10.0.2.31", young)
	hold("stale-0", "default", "stale-0", "", "10.0.1.13", old)
	hold("unknown-0", "", "", "", "10.0.1.50", old)
	c.Pool.Cool(Addr("10.0.2.40"))

	orphan := []kernel.Rule{
		ToPod(Addr("10.0.2.20")), FromPod(Addr("10.0.2.20"), 2),
		ToPod(Addr("2600:1f14:1:1::20")),
		FromPod(Addr("10.0.2.21"), 2),
		IIF(v4, sgGone, 107), IIF(v4, "vlan.eth.7", 107), IIF(v6, sgGone, 107),
	}
	ofGone := []kernel.Rule{
		ToPod(Addr("10.0.2.30")), FromPod(Addr("10.0.2.30"), 2),
		ToPod(Addr("2600:1f14:1:1::30")), ToPod(Addr("10.0.1.40")),
	}
	needed := []kernel.Rule{
		ToPod(Addr("10.0.2.31")),                                // young-0's
		ToPod(Addr("10.0.2.40")), FromPod(Addr("10.0.2.40"), 2), // cooling
		IIF(v4, sg0, 105), IIF(v6, sg0, 105), IIF(v4, "vlan.eth.8", 108),
	}
	// A foreign rule that a delete of the orphan `512: to 10.0.2.21 lookup
	// main` would remove in its place: the kernel deletes the first rule
	// matching the request, and a request cannot say "no iif". It is
	// added first, so the orphan must be left. (An extra src or dst cannot
	// make this case on Linux: adding the orphan after it is EEXIST.)
	shadow := kernel.Rule{Priority: 512, Family: v4, Dst: Net("10.0.2.21/32"), IifName: "eth0", Table: kernel.TableMain}
	shadowed := ToPod(Addr("10.0.2.21"))
	foreign := []kernel.Rule{
		{Priority: 512, Family: v4, Dst: Net("10.0.1.0/24"), Table: kernel.TableMain},
		{Priority: 1536, Family: v4, Src: Net("192.168.7.7/32"), Table: 2},
		{Priority: 512, Family: v4, Dst: Net("10.0.2.50/32"), Table: kernel.TableLocal},
		{Priority: 512, Family: v4, Dst: Net("10.0.2.53/32"), Table: 2},
		{Priority: 1536, Family: v4, Src: Net("10.0.2.51/32"), IifName: "eth0", Table: 2},
		{Priority: 1536, Family: v4, Src: Net("10.0.2.52/32"), Mark: 0x80, Mask: 0x80, Table: 2},
		{Priority: 1536, Family: v4, Src: Net("10.0.2.54/32"), Table: kernel.TableDefault},
		{Priority: 1536, Family: v4, Src: Net("10.0.2.55/32"), Dst: Net("8.8.8.8/32"), Table: 2},
		{Priority: 1536, Family: v6, Src: Net("2600:1f14:1:1::56/128"), OifName: "eth0", Table: 2},
		{Priority: 512, Family: v6, Dst: Net("2600:1f14:1:2::/64"), Table: kernel.TableMain},
		// The shape of a pod's 1536 rule, but eth0's pods use main: not a
		// table of this address's ENI, so not a pod rule of this node.
		FromPod(Addr("2600:1f14:1:1::20"), 10001),
		// A pool address that is the node's own (eth1's primary address).
		ToPod(Addr("10.0.2.10")),
		IIF(v4, "eth0", 2),
		IIF(v4, sgGone, 2),         // not a VLAN table
		IIF(v4, "vlan.eth.9", 107), // the table of another VLAN
		IIF(v4, "vlanXYZ", 107),    // not a pod's name hash
		// An extra selector; listed after the orphan of the same iif and
		// table, so deleting the orphan is safe.
		{Priority: 10, Family: v4, IifName: sgGone, Mark: 1, Mask: 0xffffffff, Table: 107},
	}
	var all []kernel.Rule
	all = append(all, shadow)
	all = append(all, orphan...)
	all = append(all, ofGone...)
	all = append(all, needed...)
	all = append(all, shadowed)
	all = append(all, foreign...)
	if err := w.Rules(all...); err != nil {
		return nil, err
	}

	for _, r := range slices.Concat(orphan, ofGone) {
		c.Removed = append(c.Removed, kernel.RuleString(r))
	}
	c.Released = []string{"gone-0", "gone-6", "rec-0"}
	c.Skipped = []string{kernel.RuleString(shadowed), "release 10.0.1.13 (default/stale-0)"}
	c.Counts = map[reconcile.Kind]int{
		reconcile.KindReleased:    3,
		reconcile.KindRuleToPod:   5,
		reconcile.KindRuleFromPod: 3,
		reconcile.KindRuleIIF:     3,
	}
	return c, nil
}

// Check compares what a pass did with what the case says it must do, and
// returns every difference: a rule or link the pass removed that it must
// not (a foreign rule, a live pod's), an orphan it left, anything added,
// a wrong release, a report that does not say what happened.
func (c *Case) Check(before, after kernel.State, rep reconcile.Report) []string {
	var problems []string
	added, removed := kernel.Diff(before, after)
	for _, a := range added {
		problems = append(problems, "added: "+a)
	}
	problems = append(problems, setDiff("removed but must survive", removed, c.Removed)...)
	problems = append(problems, setDiff("orphan left", c.Removed, removed)...)
	released := c.Pool.Released()
	problems = append(problems, setDiff("released but must be kept", released, c.Released)...)
	problems = append(problems, setDiff("not released", c.Released, released)...)
	var reported []string
	for _, m := range rep.Removed {
		if m.Kind != reconcile.KindReleased {
			reported = append(reported, m.String())
		}
	}
	problems = append(problems, setDiff("report names a removal the kernel does not show", reported, removed)...)
	problems = append(problems, setDiff("removal not reported", removed, reported)...)
	for _, k := range reconcile.Kinds {
		if rep.Counts[k] != c.Counts[k] {
			problems = append(problems, fmt.Sprintf("count %s = %d, want %d", k, rep.Counts[k], c.Counts[k]))
		}
	}
	var skipped []string
	for _, s := range rep.Skipped {
		skipped = append(skipped, s.What)
	}
	problems = append(problems, setDiff("skipped unexpectedly", skipped, c.Skipped)...)
	problems = append(problems, setDiff("not skipped", c.Skipped, skipped)...)
	return problems
}

// setDiff names the elements of a that b lacks (counted one for one).
func setDiff(what string, a, b []string) []string {
	var out []string
	for _, x := range kernel.Minus(a, b) {
		out = append(out, what+": "+x)
	}
	return out
}
