package ktest

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

// The differential suite drives two implementations of kernel.API (the
// model and the real kernel) with the same operations and compares what
// they answer. Operations name namespaces and links, never indexes: the
// two number their links differently, and a name means the same thing on
// both.

// World is one implementation of a machine as the differential suite
// drives it: namespaces by name, created and deleted on demand.
type World interface {
	// API is the handle of a live namespace, nil when there is none.
	API(ns string) kernel.API
	// AddNS creates a namespace ready for use: IPv6 enabled, no DAD on
	// new links (DAD is not modelled), lo up. EEXIST when it exists.
	AddNS(ns string) error
	// DelNS deletes a namespace with everything in it.
	DelNS(ns string) error
	// Live lists the live namespaces, sorted.
	Live() []string
	// Settle waits until work the implementation finishes on its own
	// (the real kernel's queues) is done, so a dump shows the result of
	// the last operation; an error when it does not settle.
	Settle() error
	// Close releases everything the world made.
	Close()
}

// Op is one operation of a sequence. Do runs it on a world and returns
// its outcome as text: "ok", "errno EEXIST", or what a lookup answered.
// The two worlds agree on an op when the texts are equal.
type Op interface {
	Do(w World) string
	String() string
	// Kind names the op's kind for statistics ("rule add", "route del").
	Kind() string
}

// missingIndex stands for a link name that does not resolve: every call
// refuses it as a missing link. 0 would not do: a route with LinkIndex 0
// has no device, which is another request.
const missingIndex = 99999

// Outcome is an error's comparable text: its errno by name, or a class
// for errors without one (their texts differ between implementations).
func Outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if e := Errno(err); e != 0 {
		return "errno " + unix.ErrnoName(e)
	}
	if errors.Is(err, kernel.ErrNamespaceGone) {
		return "namespace gone"
	}
	return "error without errno"
}

func noNS(ns string) string { return "no namespace " + ns }

func index(api kernel.API, name string) int {
	l, err := api.LinkByName(name)
	if err != nil {
		return missingIndex
	}
	return l.Index
}

// NsAdd creates a namespace.
type NsAdd struct{ NS string }

func (o NsAdd) Do(w World) string { return Outcome(w.AddNS(o.NS)) }
func (o NsAdd) Kind() string      { return "netns add" }

func (o NsAdd) String() string { return "netns add " + o.NS }

// NsDel deletes a namespace; its links' veth peers elsewhere go with it.
type NsDel struct{ NS string }

func (o NsDel) Do(w World) string { return Outcome(w.DelNS(o.NS)) }
func (o NsDel) Kind() string      { return "netns del" }

func (o NsDel) String() string { return "netns del " + o.NS }

// Veth creates a pair from NS with its peer in PeerNS (the same or
// another), and with Up sets both ends up at once.
type Veth struct {
	NS, Name, PeerNS, Peer string
	MTU                    int
	Up                     bool
}

func (o Veth) Do(w World) string {
	a, p := w.API(o.NS), w.API(o.PeerNS)
	if a == nil {
		return noNS(o.NS)
	}
	if p == nil {
		return noNS(o.PeerNS)
	}
	spec := kernel.VethSpec{Name: o.Name, MTU: o.MTU, PeerName: o.Peer}
	if o.PeerNS != o.NS {
		spec.PeerNamespace = p
	}
	if err := a.AddVeth(spec); err != nil || !o.Up {
		return Outcome(err)
	}
	return Outcome(a.LinkSetUp(o.Name)) + ", " + Outcome(p.LinkSetUp(o.Peer))
}

func (o Veth) Kind() string { return "veth add" }

func (o Veth) String() string {
	s := fmt.Sprintf("%s: veth add %s mtu %d peer %s netns %s", o.NS, q(o.Name), o.MTU, q(o.Peer), o.PeerNS)
	if o.Up {
		s += ", both up"
	}
	return s
}

// Vlan creates an 802.1Q link on a parent of the same namespace.
type Vlan struct {
	NS, Name, Parent string
	ID               int
}

func (o Vlan) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.AddVlan(kernel.VlanSpec{Name: o.Name, ParentIndex: index(a, o.Parent), VlanID: o.ID}))
}

func (o Vlan) Kind() string { return "vlan add" }

func (o Vlan) String() string {
	return fmt.Sprintf("%s: vlan add %s link %s id %d", o.NS, q(o.Name), o.Parent, o.ID)
}

// Bridge creates a bridge (no ports: up, it has no carrier).
type Bridge struct {
	NS, Name string
	MTU      int
}

func (o Bridge) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.AddBridge(o.Name, o.MTU))
}

func (o Bridge) Kind() string { return "bridge add" }

func (o Bridge) String() string {
	return fmt.Sprintf("%s: bridge add %s mtu %d", o.NS, q(o.Name), o.MTU)
}

// LinkUp sets a link up.
type LinkUp struct{ NS, Name string }

func (o LinkUp) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.LinkSetUp(o.Name))
}

func (o LinkUp) Kind() string { return "link up" }

func (o LinkUp) String() string { return fmt.Sprintf("%s: link set %s up", o.NS, o.Name) }

// LinkDel deletes a link (its routes go, rules naming it stay).
type LinkDel struct{ NS, Name string }

func (o LinkDel) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.LinkDel(o.Name))
}

func (o LinkDel) Kind() string { return "link del" }

func (o LinkDel) String() string { return fmt.Sprintf("%s: link del %s", o.NS, o.Name) }

// Addr adds or deletes an address.
type Addr struct {
	NS, Link, Prefix string
	Del              bool
}

func (o Addr) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	i := index(a, o.Link)
	if o.Del {
		return Outcome(a.AddrDel(i, Prefix(o.Prefix)))
	}
	return Outcome(a.AddrAdd(i, Prefix(o.Prefix)))
}

func (o Addr) Kind() string { return "addr " + verb(o.Del, "add") }

func (o Addr) String() string {
	return fmt.Sprintf("%s: addr %s %s dev %s", o.NS, verb(o.Del, "add"), o.Prefix, o.Link)
}

// Route adds, replaces or deletes a route; Link "" is no device.
type Route struct {
	NS, Verb string // "add", "replace", "del"
	R        kernel.Route
	Link     string
}

func (o Route) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	r := o.R
	if o.Link != "" {
		r.LinkIndex = index(a, o.Link)
	}
	switch o.Verb {
	case "replace":
		return Outcome(a.RouteReplace(r))
	case "del":
		return Outcome(a.RouteDel(r))
	}
	return Outcome(a.RouteAdd(r))
}

func (o Route) Kind() string { return "route " + o.Verb }

func (o Route) String() string {
	r := o.R
	var b strings.Builder
	fmt.Fprintf(&b, "%s: route %s", o.NS, o.Verb)
	if r.Table != 0 {
		fmt.Fprintf(&b, " table %s", kernel.TableString(r.Table))
	}
	switch {
	case r.Dst != nil:
		fmt.Fprintf(&b, " %s", r.Dst)
	case r.Family == kernel.FamilyV6:
		b.WriteString(" inet6 default")
	default:
		b.WriteString(" default")
	}
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	if o.Link != "" {
		fmt.Fprintf(&b, " dev %s", o.Link)
	}
	if r.Scope == kernel.ScopeLink {
		b.WriteString(" scope link")
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	return b.String()
}

// Rule adds or deletes a rule.
type Rule struct {
	NS  string
	R   kernel.Rule
	Del bool
}

func (o Rule) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	if o.Del {
		return Outcome(a.RuleDel(o.R))
	}
	return Outcome(a.RuleAdd(o.R))
}

// String prints the request, unset fields left out (so a delete shows
// its wildcards): "node: rule add 512 from 10.0.1.15 lookup main".
func (o Rule) Kind() string { return "rule " + verb(o.Del, "add") }

func (o Rule) String() string {
	r := o.R
	var b strings.Builder
	fmt.Fprintf(&b, "%s: rule %s", o.NS, verb(o.Del, "add"))
	if r.Priority != 0 {
		fmt.Fprintf(&b, " %d", r.Priority)
	}
	if r.Family == kernel.FamilyV6 && r.Src == nil && r.Dst == nil {
		b.WriteString(" inet6")
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " from %s", r.Src)
	}
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", r.Dst)
	}
	if r.IifName != "" {
		fmt.Fprintf(&b, " iif %s", r.IifName)
	}
	if r.OifName != "" {
		fmt.Fprintf(&b, " oif %s", r.OifName)
	}
	if r.Mark != 0 {
		fmt.Fprintf(&b, " fwmark %#x", r.Mark)
	}
	if r.Table != 0 {
		fmt.Fprintf(&b, " lookup %s", kernel.TableString(r.Table))
	}
	return b.String()
}

// Neigh sets a permanent neighbour.
type Neigh struct{ NS, Link, IP string }

// neighMAC is the MAC of every neighbour the suite sets.
var neighMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}

func (o Neigh) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.NeighSet(kernel.Neigh{LinkIndex: index(a, o.Link), IP: net.ParseIP(o.IP), HardwareAddr: neighMAC,
		State: kernel.NeighStatePermanent}))
}

func (o Neigh) Kind() string { return "neigh replace" }

func (o Neigh) String() string {
	return fmt.Sprintf("%s: neigh replace %s lladdr %s nud permanent dev %s", o.NS, o.IP, neighMAC, o.Link)
}

// Sysctl writes a key.
type Sysctl struct{ NS, Key, Value string }

func (o Sysctl) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	return Outcome(a.SysctlSet(o.Key, o.Value))
}

func (o Sysctl) Kind() string { return "sysctl" }

func (o Sysctl) String() string { return fmt.Sprintf("%s: sysctl %s=%s", o.NS, o.Key, o.Value) }

// Get asks where a packet goes. The answer compared is the output link,
// the table and the gateway: what the real kernel reports (it does not
// say which rule chose the table).
type Get struct {
	NS string
	Q  kernel.RouteQuery
}

func (o Get) Do(w World) string {
	a := w.API(o.NS)
	if a == nil {
		return noNS(o.NS)
	}
	res, err := a.RouteGet(o.Q)
	if err != nil {
		return Outcome(err)
	}
	s := fmt.Sprintf("table %s dev %s", kernel.TableString(res.Table), res.LinkName)
	if res.Gw != nil {
		s += " via " + res.Gw.String()
	}
	return s
}

func (o Get) Kind() string { return "route get" }

func (o Get) String() string {
	s := fmt.Sprintf("%s: route get %s", o.NS, o.Q.Dst)
	if o.Q.Src != nil {
		s += " from " + o.Q.Src.String()
	}
	if o.Q.IifName != "" {
		s += " iif " + o.Q.IifName
	}
	return s
}

func verb(del bool, add string) string {
	if del {
		return "del"
	}
	return add
}

// q quotes a link name that would not read as one (empty, or with spaces).
func q(s string) string {
	if s == "" || strings.ContainsAny(s, " \t") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
