package ktest

import (
	"math/rand/v2"
	"net"

	"github.com/vpccni/vpccni/kernel"
)

// GenOptions says what the kernel under comparison can do.
type GenOptions struct {
	// Vlan: the kernel makes 802.1Q links. Without it the generator makes
	// no VLAN ops (the real kernel refuses them and the model does not
	// pretend to be such a kernel).
	Vlan bool
}

// Namespaces of a sequence: node and pods are driven by the ops; vpc
// only holds the far ends of the node's eth0 and eth1, so that they have
// carrier, and is compared but not touched.
var Pods = []string{"pod1", "pod2", "pod3"}

// Link names come from pools by kind, so a name says what a link is when
// it exists: upNames are veths made with both ends set up (carrier at
// once), downNames veths left down. Links without carrier (a bridge
// without ports, a veth whose peer is down) get IPv6 addresses as well:
// with DAD off, as World.AddNS leaves new links, Linux makes them usable
// at once, carrier or not, as the model does.
var (
	upNames     = []string{"eth0", "eth1", "u0", "u1", "u2"}
	downNames   = []string{"d0", "d1", "d2"}
	bridgeNames = []string{"br0", "br1"}
	vlanNames   = []string{"vl0", "vl1"}
	badNames    = []string{"", "sixteen-chars-xx"} // EINVAL, ERANGE
)

var (
	v4Hosts = []string{"10.0.1.10", "10.0.1.15", "10.0.2.10", "10.0.2.11", "10.0.3.5", "169.254.1.1"}
	v6Hosts = []string{"2001:db8:1::10", "2001:db8:1::15", "2001:db8:2::10", "2001:db8:2::11"}
	// Route destinations; "" is the default route. 10.1.2.3/16 has host
	// bits (EINVAL for IPv4), 2001:db8:8::1/64 too (IPv6 masks them).
	v4Dsts = []string{"", "10.0.1.0/24", "10.0.2.0/24", "10.0.2.11/32", "10.0.3.0/24", "10.1.0.0/16", "169.254.1.1/32",
		"198.51.100.0/24", "10.0.1.15/32", "10.1.2.3/16"}
	v6Dsts = []string{"", "2001:db8:1::/64", "2001:db8:2::/64", "2001:db8:2::11/128", "2001:db8:9::/64",
		"2001:db8:1::15/128", "2001:db8:8::1/64"}
	v4Gws = []string{"10.0.1.1", "10.0.2.1", "169.254.1.1", "10.0.3.1", "10.0.1.15"}
	// fe80::1 needs a device; 2001:db8:1::10 may be a local address (EINVAL).
	v6Gws     = []string{"fe80::1", "2001:db8:1::1", "2001:db8:2::1", "2001:db8:1::10"}
	v4Lookups = []string{"198.51.100.7", "10.1.2.3", "10.0.3.9", "10.0.1.1"}
	v6Lookups = []string{"2600::7", "2001:db8:9::1", "2001:db8:1::1"}
	tables    = []int{0, kernel.TableMain, 2, 3, 101}
)

// Preamble is the fixed start of every sequence (never dropped when a
// sequence is shrunk): the node with eth0 and eth1, veths whose far ends
// are in vpc, both ends up; eth0 addressed in both families with default
// routes through it; forwarding on; one pod.
func Preamble() []Op {
	return []Op{
		NsAdd{"node"}, NsAdd{"vpc"},
		Veth{NS: "vpc", Name: "veth0", PeerNS: "node", Peer: "eth0", MTU: 9001, Up: true},
		Veth{NS: "vpc", Name: "veth1", PeerNS: "node", Peer: "eth1", MTU: 9001, Up: true},
		Addr{NS: "node", Link: "eth0", Prefix: "10.0.1.10/24"},
		Addr{NS: "node", Link: "eth0", Prefix: "2001:db8:1::10/64"},
		Route{NS: "node", Verb: "add", R: kernel.Route{Gw: net.ParseIP("10.0.1.1")}, Link: "eth0"},
		Route{NS: "node", Verb: "add", R: kernel.Route{Gw: net.ParseIP("fe80::1")}, Link: "eth0"},
		Sysctl{"node", "net/ipv4/ip_forward", "1"},
		NsAdd{"pod1"},
	}
}

type gen struct {
	r      *rand.Rand
	opt    GenOptions
	b      *belief
	rules  []Rule  // rule adds made so far: duplicated, varied, deleted
	routes []Route // route adds made so far
}

// Generate returns n random ops (to run after Preamble), the same for the
// same seed and options.
func Generate(seed uint64, n int, opt GenOptions) []Op {
	g := &gen{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), opt: opt, b: newBelief()}
	for _, op := range Preamble() {
		g.b.note(op)
	}
	type kind struct {
		weight int
		make   func() Op
	}
	kinds := []kind{
		{2, g.nsAdd},
		{2, func() Op { return NsDel{pick(g.r, Pods)} }},
		{7, g.veth},
		{2, func() Op { return Bridge{NS: g.ns(), Name: g.newName(bridgeNames), MTU: pick(g.r, []int{0, 1500})} }},
		{4, g.linkUp},
		{3, func() Op { ns := g.ns(); return LinkDel{ns, g.link(ns)} }},
		{10, g.addr},
		{3, g.addrDel},
		{14, func() Op { return g.route("add") }},
		{3, func() Op { return g.route("replace") }},
		{6, g.routeDel},
		{12, g.rule},
		{6, g.ruleDel},
		{12, g.get},
		{2, func() Op {
			ns := g.ns()
			return Neigh{ns, g.link(ns), pick(g.r, []string{"169.254.1.1", "10.0.1.1", "fe80::1", "2001:db8:1::1"})}
		}},
		{2, func() Op {
			return Sysctl{g.ns(), pick(g.r, []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"}), pick(g.r, []string{"0", "1"})}
		}},
	}
	if opt.Vlan {
		kinds = append(kinds, kind{2, func() Op {
			ns := g.ns()
			return Vlan{NS: ns, Name: g.newName(vlanNames), Parent: g.link(ns), ID: pick(g.r, []int{5, 6})}
		}})
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	ops := make([]Op, 0, n)
	for len(ops) < n {
		x := g.r.IntN(total)
		for _, k := range kinds {
			if x -= k.weight; x < 0 {
				op := k.make()
				g.b.note(op)
				ops = append(ops, op)
				break
			}
		}
	}
	return ops
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

// ns is a live namespace (the node half the time) and now and then a pod
// that may not be: an op on a missing one is refused alike on both.
func (g *gen) ns() string {
	if g.chance(0.5) {
		return "node"
	}
	if live := g.b.liveNS(); g.chance(0.9) && len(live) > 0 {
		return pick(g.r, live)
	}
	return pick(g.r, Pods)
}

// nsAdd mostly adds a pod that is not there.
func (g *gen) nsAdd() Op {
	var gone []string
	for _, p := range Pods {
		if !g.b.live(p) {
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 && g.chance(0.85) {
		return NsAdd{pick(g.r, gone)}
	}
	return NsAdd{pick(g.r, Pods)}
}

// newName is a name for a new link of a pool, now and then one the kernel
// refuses.
func (g *gen) newName(pool []string) string {
	if g.chance(0.04) {
		return pick(g.r, badNames)
	}
	return pick(g.r, pool)
}

// link names a link of ns: mostly one believed to be there, else any of
// the pools, lo, or one that never exists.
func (g *gen) link(ns string) string {
	if have := g.b.linkNames(ns, nil); len(have) > 0 && g.chance(0.85) {
		return pick(g.r, have)
	}
	x := g.r.Float64()
	switch {
	case x < 0.5:
		return pick(g.r, upNames)
	case x < 0.7:
		return pick(g.r, downNames)
	case x < 0.8:
		return pick(g.r, bridgeNames)
	case x < 0.85 && g.opt.Vlan:
		return pick(g.r, vlanNames)
	case x < 0.92:
		return "lo"
	}
	return "nope"
}

// linkUp mostly sets up a link believed down.
func (g *gen) linkUp() Op {
	ns := g.ns()
	if down := g.b.linkNames(ns, func(_ string, l *blink) bool { return !l.up }); len(down) > 0 && g.chance(0.7) {
		return LinkUp{ns, pick(g.r, down)}
	}
	return LinkUp{ns, g.link(ns)}
}

// veth makes a pair across namespaces (often a pod's with its peer in the
// node), either with carrier at once (upNames, both ends set up) or down
// (downNames).
func (g *gen) veth() Op {
	o := Veth{NS: g.ns(), MTU: pick(g.r, []int{0, 1500, 9001})}
	o.PeerNS = "node"
	if g.chance(0.4) {
		o.PeerNS = g.ns()
	}
	pool := downNames
	if o.Up = g.chance(0.65); o.Up {
		pool = upNames
	}
	o.Name, o.Peer = g.newName(pool), g.newName(pool)
	return o
}

func (g *gen) v4() bool { return g.chance(0.6) }

// host is an address of the family with a host, subnet or wider prefix.
func (g *gen) host(v4 bool) string {
	if v4 {
		return pick(g.r, v4Hosts) + pick(g.r, []string{"/32", "/32", "/24", "/24", "/16"})
	}
	return pick(g.r, v6Hosts) + pick(g.r, []string{"/128", "/64", "/64"})
}

func (g *gen) addr() Op {
	v4 := g.v4()
	o := Addr{NS: g.ns(), Prefix: g.host(v4)}
	o.Link = g.link(o.NS)
	return o
}

func (g *gen) addrDel() Op {
	ns := g.ns()
	if have := g.b.addrs[ns]; len(have) > 0 && g.chance(0.7) {
		o := pick(g.r, have)
		o.Del = true
		return o
	}
	return Addr{NS: ns, Prefix: g.host(g.v4()), Link: g.link(ns), Del: true}
}

func ipOrNil(s string) net.IP {
	if s == "" {
		return nil
	}
	return net.ParseIP(s)
}

func netOrNil(s string) *net.IPNet {
	if s == "" {
		return nil
	}
	return Prefix(s)
}

func (g *gen) freshRoute(verb string) Route {
	v4 := g.v4()
	o := Route{NS: g.ns(), Verb: verb}
	r := &o.R
	r.Table = pick(g.r, tables)
	dsts, gws, hosts := v6Dsts, v6Gws, v6Hosts
	r.Family = kernel.FamilyV6
	if v4 {
		dsts, gws, hosts = v4Dsts, v4Gws, v4Hosts
		r.Family = kernel.FamilyV4
	}
	r.Dst = netOrNil(pick(g.r, dsts))
	if g.chance(0.1) {
		r.Src = net.ParseIP(pick(g.r, hosts))
	}
	if v4 && g.chance(0.15) {
		r.Priority = 100
	} else if !v4 {
		r.Priority = pick(g.r, []int{0, 0, 0, 0, 5, 1024})
	}
	// A device, and a gateway or not: often a neighbour in the subnet of
	// an address the namespace has, through that address's link.
	have := g.b.addrsOf(o.NS, v4)
	switch {
	case len(have) > 0 && g.chance(0.5):
		a := pick(g.r, have)
		r.Gw = ipOrNil(neighbourOf(a.Prefix))
		o.Link = a.Link
		if r.Gw != nil && g.chance(0.2) {
			o.Link = ""
		}
	case g.chance(0.4):
		r.Gw = net.ParseIP(pick(g.r, gws))
		if g.chance(0.8) {
			o.Link = g.link(o.NS)
		}
	default:
		o.Link = g.link(o.NS)
	}
	if r.Gw == nil && g.chance(0.4) || g.chance(0.05) {
		r.Scope = kernel.ScopeLink
	}
	return o
}

func (g *gen) route(verb string) Op {
	if len(g.routes) > 0 && g.chance(0.2) {
		o := pick(g.r, g.routes) // a duplicate on purpose (replace: the same again)
		o.Verb = verb
		return o
	}
	o := g.freshRoute(verb)
	g.routes = append(g.routes, o)
	return o
}

// routeDel deletes a route added before, with some fields left as
// wildcards, or one that probably is not there.
func (g *gen) routeDel() Op {
	if len(g.routes) == 0 || g.chance(0.3) {
		return g.freshRoute("del")
	}
	o := pick(g.r, g.routes)
	o.Verb = "del"
	if g.chance(0.4) {
		o.R.Gw = nil
	}
	if g.chance(0.4) {
		o.Link = ""
	}
	if g.chance(0.4) {
		o.R.Scope = 0
	}
	if g.chance(0.3) {
		o.R.Priority = 0
	}
	return o
}

// selector is a rule's source or destination: none, an address the
// namespace has, or one of the pool, mostly host prefixes.
func (g *gen) selector(ns string, v4 bool) *net.IPNet {
	if g.chance(0.5) {
		return nil
	}
	if have := g.b.addrsOf(ns, v4); len(have) > 0 && g.chance(0.4) {
		return Prefix(pick(g.r, have).Prefix)
	}
	if v4 {
		return Prefix(pick(g.r, v4Hosts) + pick(g.r, []string{"/32", "/32", "/32", "/24"}))
	}
	return Prefix(pick(g.r, v6Hosts) + pick(g.r, []string{"/128", "/128", "/128", "/64"}))
}

func (g *gen) ifname(ns string, p float64) string {
	if !g.chance(p) {
		return ""
	}
	if have := g.b.linkNames(ns, nil); len(have) > 0 && g.chance(0.6) {
		return pick(g.r, have)
	}
	return pick(g.r, []string{"eth0", "eth1", "u0", "d0", "lo", "nope"})
}

func (g *gen) freshRule() Rule {
	v4 := g.v4()
	o := Rule{NS: g.ns()}
	r := &o.R
	r.Family = kernel.FamilyV6
	if v4 {
		r.Family = kernel.FamilyV4
	}
	r.Priority = pick(g.r, []int{512, 512, 1536, 1536, 10, 32765, 0})
	if g.chance(0.2) {
		r.Priority = 1 + g.r.IntN(40000)
	}
	r.Src, r.Dst = g.selector(o.NS, v4), g.selector(o.NS, v4)
	r.IifName, r.OifName = g.ifname(o.NS, 0.2), g.ifname(o.NS, 0.1)
	r.Table = pick(g.r, []int{kernel.TableMain, kernel.TableMain, 2, 2, 3, 101, 0})
	if g.chance(0.05) {
		r.Mark = 0x80
	}
	return o
}

// rule adds a fresh rule, or one like an earlier one: the same (EEXIST),
// with a selector dropped, which Linux also refuses when an existing rule
// matches with the dropped selector as a wildcard, or with one added.
func (g *gen) rule() Op {
	if len(g.rules) > 0 && g.chance(0.4) {
		o := pick(g.r, g.rules)
		o.Del = false
		switch x := g.r.Float64(); {
		case x < 0.4: // the same
		case x < 0.85:
			if g.chance(0.5) {
				o.R.Src = nil
			} else {
				o.R.Dst = nil
			}
			if g.chance(0.2) {
				o.R.IifName = ""
			}
		default:
			o.R.Src = g.selector(o.NS, o.R.Family == kernel.FamilyV4)
		}
		g.rules = append(g.rules, o)
		return o
	}
	o := g.freshRule()
	g.rules = append(g.rules, o)
	return o
}

// ruleDel deletes a rule like one added before, each field a wildcard
// now and then, or one that probably is not there.
func (g *gen) ruleDel() Op {
	if len(g.rules) == 0 || g.chance(0.3) {
		o := g.freshRule()
		o.Del = true
		return o
	}
	o := pick(g.r, g.rules)
	o.Del = true
	r := &o.R
	for _, zero := range []func(){
		func() { r.Priority = 0 }, func() { r.Src = nil }, func() { r.Dst = nil }, func() { r.IifName = "" },
		func() { r.OifName = "" }, func() { r.Table = 0 }, func() { r.Mark = 0 },
	} {
		if g.chance(0.35) {
			zero()
		}
	}
	return o
}

// get asks for a destination that is local, in a subnet the namespace
// has, or elsewhere; from a source the namespace has or not; as output
// or as arriving on a link.
func (g *gen) get() Op {
	v4 := g.v4()
	o := Get{NS: g.ns()}
	lookups, hosts := v6Lookups, v6Hosts
	if v4 {
		lookups, hosts = v4Lookups, v4Hosts
	}
	have := g.b.addrsOf(o.NS, v4)
	var routed []*net.IPNet // destinations of routes added in the namespace
	for _, r := range g.routes {
		if r.NS == o.NS && r.R.Dst != nil && (r.R.Dst.IP.To4() != nil) == v4 {
			routed = append(routed, r.R.Dst)
		}
	}
	switch x := g.r.Float64(); {
	case x < 0.2 && len(have) > 0:
		o.Q.Dst = Prefix(pick(g.r, have).Prefix).IP
	case x < 0.4 && len(have) > 0:
		o.Q.Dst = ipOrNil(neighbourOf(pick(g.r, have).Prefix))
	case x < 0.6 && len(routed) > 0:
		d := pick(g.r, routed)
		o.Q.Dst = append(net.IP(nil), d.IP.Mask(d.Mask)...)
		o.Q.Dst[len(o.Q.Dst)-1] |= 9
	}
	if o.Q.Dst == nil {
		o.Q.Dst = net.ParseIP(pick(g.r, append(lookups, hosts...)))
	}
	switch {
	case len(have) > 0 && g.chance(0.3):
		o.Q.Src = Prefix(pick(g.r, have).Prefix).IP
	case g.chance(0.2):
		o.Q.Src = net.ParseIP(pick(g.r, append(hosts, "10.9.9.9")))
		if !v4 {
			o.Q.Src = net.ParseIP(pick(g.r, hosts))
		}
	}
	if g.chance(0.3) {
		o.Q.IifName = g.link(o.NS)
	}
	return o
}
