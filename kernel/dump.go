package kernel

import (
	"fmt"
	"net"
	"sort"
	"strings"
)

// State is a namespace's networking as normalised, human-readable lines,
// the same for the model and the real kernel, so two States can be
// compared line by line (kernel/linux's tests compare the model with
// Linux this way). Left out are what differs between the two or what
// Linux makes on its own: link indexes and MACs, lo and its 127.0.0.1/8
// and ::1, IPv6 link-local (fe80::/10) addresses and routes, the local
// table, multicast routes, neighbours that are not PERMANENT.
//
// Lines look like `ip` output with a section word in front:
//
//	link eni1a2b3c4d5e6 veth up mtu 9001
//	link vlan.eth.1 vlan down mtu 9001 vlan 1 parent eth1
//	addr 10.0.1.15/32 dev eth0
//	route table main: 10.0.1.15/32 dev eni1a2b3c4d5e6 scope link
//	route table 2: default via 10.0.2.1 dev eth1
//	route table main: 2001:db8::/64 dev eth0 proto kernel metric 256
//	rule 512: from all to 10.0.1.15 lookup main
//	rule 512: inet6 from all to 2001:db8::5 lookup main
//	neigh 169.254.1.1 lladdr 02:aa:00:00:00:01 PERMANENT dev eth0
type State struct {
	Links, Addrs, Routes, Rules, Neighs []string
}

// Snapshot reads a namespace's State through the API.
func Snapshot(api API) (State, error) {
	var s State
	links, err := api.LinkList()
	if err != nil {
		return s, err
	}
	byIndex := map[int]Link{}
	for _, l := range links {
		byIndex[l.Index] = l
	}
	dev := func(i int) string {
		if l, ok := byIndex[i]; ok {
			return l.Name
		}
		return fmt.Sprintf("if%d", i)
	}
	for _, l := range links {
		if l.Kind == KindLoopback {
			continue
		}
		s.Links = append(s.Links, linkLine(l, byIndex))
	}
	addrs, err := api.AddrList(0, FamilyAll)
	if err != nil {
		return s, err
	}
	for _, a := range addrs {
		if autoAddr(a, byIndex[a.LinkIndex]) {
			continue
		}
		line := fmt.Sprintf("addr %s dev %s", a.IPNet, dev(a.LinkIndex))
		if a.Flags&0x01 != 0 { // IFA_F_SECONDARY
			line += " secondary"
		}
		s.Addrs = append(s.Addrs, line)
	}
	routes, err := api.RouteList(FamilyAll, TableUnspec)
	if err != nil {
		return s, err
	}
	for _, r := range routes {
		if r.Table == TableLocal || (r.Dst != nil && (r.Dst.IP.IsMulticast() || (r.Family == FamilyV6 && r.Dst.IP.IsLinkLocalUnicast()))) {
			continue
		}
		s.Routes = append(s.Routes, RouteString(r, dev))
	}
	rules, err := api.RuleList(FamilyAll)
	if err != nil {
		return s, err
	}
	// IPv4 rules, then IPv6; each in priority order, ties as listed (the
	// order they were added, on both implementations).
	sort.SliceStable(rules, func(i, j int) bool {
		if rules[i].Family != rules[j].Family {
			return rules[i].Family < rules[j].Family
		}
		return rules[i].Priority < rules[j].Priority
	})
	for _, r := range rules {
		s.Rules = append(s.Rules, RuleString(r))
	}
	neighs, err := api.NeighList(0, FamilyAll)
	if err != nil {
		return s, err
	}
	for _, n := range neighs {
		if n.State&NeighStatePermanent == 0 {
			continue
		}
		s.Neighs = append(s.Neighs, fmt.Sprintf("neigh %s lladdr %s PERMANENT dev %s", n.IP, n.HardwareAddr, dev(n.LinkIndex)))
	}
	for _, l := range [][]string{s.Links, s.Addrs, s.Routes, s.Neighs} {
		sort.Strings(l)
	}
	return s, nil
}

// linkLine prints a link; a veth's peer is named when it is in the same
// namespace (the two point at each other), a VLAN's parent always.
func linkLine(l Link, byIndex map[int]Link) string {
	state := "down"
	if l.Up {
		state = "up"
	}
	line := fmt.Sprintf("link %s %s %s mtu %d", l.Name, l.Kind, state, l.MTU)
	p, ok := byIndex[l.ParentIndex]
	switch {
	case l.Kind == KindVlan:
		parent := fmt.Sprintf("if%d", l.ParentIndex)
		if ok {
			parent = p.Name
		}
		line += fmt.Sprintf(" vlan %d parent %s", l.VlanID, parent)
	case l.Kind == KindVeth && ok && p.Kind == KindVeth && p.ParentIndex == l.Index && p.Index != l.Index:
		line += " peer " + p.Name
	}
	return line
}

// autoAddr: addresses Linux adds by itself (lo's, IPv6 link-local).
func autoAddr(a Addr, l Link) bool {
	if a.IPNet == nil {
		return true
	}
	ip := a.IPNet.IP
	if ip.To4() == nil && ip.IsLinkLocalUnicast() {
		return true
	}
	if l.Kind == KindLoopback {
		s := a.IPNet.String()
		return s == "127.0.0.1/8" || s == "::1/128"
	}
	return false
}

// TableString prints a table as `ip` does.
func TableString(t int) string {
	switch t {
	case TableMain:
		return "main"
	case TableLocal:
		return "local"
	case TableDefault:
		return "default"
	}
	return fmt.Sprint(t)
}

// RouteString prints a route like `ip route show table all`, with the
// table first: "route table main: 10.0.1.0/24 dev eth0 proto kernel scope
// link src 10.0.1.10". An IPv6 default route is "inet6 default".
func RouteString(r Route, dev func(int) string) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	} else if r.Family == FamilyV6 {
		dst = "inet6 default"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "route table %s: ", TableString(r.Table))
	if r.Type == RouteTypeLocal {
		b.WriteString("local ")
	}
	b.WriteString(dst)
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	fmt.Fprintf(&b, " dev %s", dev(r.LinkIndex))
	if r.Protocol == 2 { // RTPROT_KERNEL
		b.WriteString(" proto kernel")
	}
	switch r.Scope {
	case ScopeLink:
		b.WriteString(" scope link")
	case ScopeHost:
		b.WriteString(" scope host")
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	return b.String()
}

// RuleString prints a rule like `ip rule` ("rule 512: from all to
// 10.0.1.15 lookup main"), with "inet6" after the priority for IPv6.
func RuleString(r Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %d: ", r.Priority)
	if r.Family == FamilyV6 {
		b.WriteString("inet6 ")
	}
	fmt.Fprintf(&b, "from %s", prefixOrAll(r.Src))
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", prefixOrAll(r.Dst))
	}
	if r.Mark != 0 || r.Mask != 0 {
		fmt.Fprintf(&b, " fwmark %#x/%#x", r.Mark, r.Mask)
	}
	if r.IifName != "" {
		fmt.Fprintf(&b, " iif %s", r.IifName)
	}
	if r.OifName != "" {
		fmt.Fprintf(&b, " oif %s", r.OifName)
	}
	fmt.Fprintf(&b, " lookup %s", TableString(r.Table))
	return b.String()
}

func prefixOrAll(n *net.IPNet) string {
	if n == nil {
		return "all"
	}
	if ones, bits := n.Mask.Size(); ones == bits {
		return n.IP.String()
	}
	return n.String()
}

// Lines is the whole state, section by section: links, addresses,
// routes, rules, neighbours.
func (s State) Lines() []string {
	var out []string
	for _, l := range [][]string{s.Links, s.Addrs, s.Routes, s.Rules, s.Neighs} {
		out = append(out, l...)
	}
	return out
}

// String is Lines joined by newlines.
func (s State) String() string { return strings.Join(s.Lines(), "\n") }

// Diff lists the lines after has more often than before (added) and the
// reverse (removed), in the order of Lines. Lines are counted, so a
// duplicate rule added next to an existing identical line still shows.
func Diff(before, after State) (added, removed []string) {
	return Minus(after.Lines(), before.Lines()), Minus(before.Lines(), after.Lines())
}

// Minus returns the elements of a not matched one-for-one by b (a
// multiset difference: a duplicate line counts).
func Minus(a, b []string) []string {
	left := map[string]int{}
	for _, x := range b {
		left[x]++
	}
	var out []string
	for _, x := range a {
		if left[x] > 0 {
			left[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}
