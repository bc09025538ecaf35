package kernel

import (
	"fmt"
	"net"
	"sort"
	"strings"
)

// State is a namespace's networking as normalised, human-readable lines,
// the same for the model and the real kernel: link indexes and MACs of
// links are left out (they differ between the two), and so is what Linux
// makes on its own — IPv6 link-local addresses and routes, the local
// table, multicast routes, non-permanent neighbours, the loopback.
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
	name := map[int]string{}
	for _, l := range links {
		name[l.Index] = l.Name
	}
	dev := func(i int) string {
		if n, ok := name[i]; ok {
			return n
		}
		return fmt.Sprintf("if%d", i)
	}
	for _, l := range links {
		if l.Kind == KindLoopback || l.Name == "lo" {
			continue
		}
		state := "down"
		if l.Up {
			state = "up"
		}
		line := fmt.Sprintf("link %s %s %s mtu %d", l.Name, l.Kind, state, l.MTU)
		if l.Kind == KindVlan {
			line += fmt.Sprintf(" vlan %d parent %s", l.VlanID, dev(l.ParentIndex))
		}
		s.Links = append(s.Links, line)
	}
	addrs, err := api.AddrList(0, FamilyAll)
	if err != nil {
		return s, err
	}
	for _, a := range addrs {
		if dev(a.LinkIndex) == "lo" || a.IPNet.IP.IsLinkLocalUnicast() {
			continue
		}
		s.Addrs = append(s.Addrs, fmt.Sprintf("addr %s dev %s", a.IPNet, dev(a.LinkIndex)))
	}
	routes, err := api.RouteList(FamilyAll, TableUnspec)
	if err != nil {
		return s, err
	}
	for _, r := range routes {
		if r.Table == TableLocal || (r.Dst != nil && (r.Dst.IP.IsLinkLocalUnicast() || r.Dst.IP.IsMulticast())) || dev(r.LinkIndex) == "lo" {
			continue
		}
		s.Routes = append(s.Routes, RouteString(r, dev))
	}
	rules, err := api.RuleList(FamilyAll)
	if err != nil {
		return s, err
	}
	// Linux dumps IPv4 rules, then IPv6; each in priority order.
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

// RouteString prints a route like `ip route show table all`.
func RouteString(r Route, dev func(int) string) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	if r.Family == FamilyV6 {
		dst = "inet6 " + dst
	}
	var b strings.Builder
	fmt.Fprintf(&b, "route table %s: %s", TableString(r.Table), dst)
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	fmt.Fprintf(&b, " dev %s", dev(r.LinkIndex))
	if r.Scope == ScopeLink {
		b.WriteString(" scope link")
	}
	return b.String()
}

// RuleString prints a rule like `ip rule` ("512: from all to 10.0.1.15
// lookup main"), with "inet6" for IPv6 rules.
func RuleString(r Rule) string {
	var b strings.Builder
	if r.Family == FamilyV6 {
		b.WriteString("inet6 ")
	}
	fmt.Fprintf(&b, "rule %d: from %s", r.Priority, prefixOrAll(r.Src))
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", prefixOrAll(r.Dst))
	}
	if r.Mark != 0 {
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

// Lines is the whole state, section by section.
func (s State) Lines() []string {
	var out []string
	for _, l := range [][]string{s.Links, s.Addrs, s.Routes, s.Rules, s.Neighs} {
		out = append(out, l...)
	}
	return out
}

// Diff lists the lines after has and before lacks, and the reverse.
func Diff(before, after State) (added, removed []string) {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	b, a := in(before.Lines()), in(after.Lines())
	for _, x := range after.Lines() {
		if !b[x] {
			added = append(added, x)
		}
	}
	for _, x := range before.Lines() {
		if !a[x] {
			removed = append(removed, x)
		}
	}
	return added, removed
}
