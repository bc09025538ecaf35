package ownership

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/kernel"
)

// Node is what the node's own namespace says about where pod addresses
// live: its ENIs, each with its subnets and its pods' route table, and
// every address the node's links carry. It is the one source every
// remover trusts for "can this address be a pod's here, and in which
// table"; a prevResult, a journal or a CNI_ARGS value is only evidence.
//
// An ENI is recognised the way ipamd and the instance's OS configure one:
//   - the primary ENI carries the main table's default route (the OS's
//     DHCP), and its pods use table main;
//   - a secondary ENI has rule 32765 `from <its primary address> lookup T`
//     (ipamd's), and its pods use table T.
//
// Its subnets are the prefixes of its addresses and, for IPv6, of its
// on-link routes in main (an IPv6 ENI may carry a /128 and learn its /64
// from a router advertisement). A trunk ENI has neither a default route
// nor rule 32765: its addresses are never handed to pods.
type Node struct {
	ENIs []ENI
	// own maps every global address of a node link to the link's index.
	own map[netip.Addr]int
	// names are the links' names, looked up only when needed (an ENI, a
	// message): one request each.
	k     kernel.API
	names map[int]string
}

// name is a link's name, or "link N" when it is gone or cannot be read.
func (n *Node) name(idx int) string {
	if name, ok := n.names[idx]; ok {
		return name
	}
	name := fmt.Sprintf("link %d", idx)
	if l, err := n.k.LinkByIndex(idx); err == nil {
		name = l.Name
	}
	n.names[idx] = name
	return name
}

// ENI is one ENI as the node shows it.
type ENI struct {
	Link    string
	Table   int
	Subnets []netip.Prefix
}

func (e ENI) String() string {
	s := make([]string, len(e.Subnets))
	for i, p := range e.Subnets {
		s[i] = p.String()
	}
	return fmt.Sprintf("%s (%s, table %s)", e.Link, strings.Join(s, " "), TableName(e.Table))
}

// ReadNode reads the node namespace's ENIs, of both families.
func ReadNode(k kernel.API) (*Node, error) {
	rules, err := k.RuleList(kernel.FamilyAll)
	if err != nil {
		return nil, fmt.Errorf("list the node's rules: %w", err)
	}
	return ReadNodeFamily(k, kernel.FamilyAll, rules)
}

// ReadNodeFamily reads the node's ENIs of one family (FamilyAll: both)
// from the kernel and from rules, the node's rules of that family as the
// caller listed them. Only that family's objects are read, so an IPv4
// pod's DEL does not parse the link-local IPv6 address of every other
// pod's host veth. Asked about an address of the other family, the Node
// knows no ENI.
func ReadNodeFamily(k kernel.API, fam kernel.Family, rules []kernel.Rule) (*Node, error) {
	return readNode(k, fam, rules, nil)
}

// ReadNodeFor reads only what PodTables and IsOwnAddress need to answer
// for the addresses given (one family, which the rules the caller listed
// must cover): the node's addresses, and the ENIs that could hold one of
// them. A teardown asks about one pod's addresses, and a node of fifteen
// ENIs would cost it two netlink requests per ENI (its name, its routes)
// for the one or two that matter. For these addresses the answers are
// those of ReadNodeFamily; other addresses may find no ENI.
func ReadNodeFor(k kernel.API, rules []kernel.Rule, addrs []netip.Addr) (*Node, error) {
	fam := FamilyOfAll(addrs)
	if fam == kernel.FamilyAll {
		return readNode(k, fam, rules, nil) // both families, or none named
	}
	n, err := readNode(k, fam, rules, addrs)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if _, err := n.PodTables(a); err != nil && ValidPodAddr(a) && !n.IsOwnAddress(a) {
			// In no subnet read: the refusal names every ENI of the node,
			// so read them all (a DEL that refuses is rare).
			return readNode(k, fam, rules, nil)
		}
	}
	return n, nil
}

// readNode reads the ENIs of fam; with for, only the links that could be
// the ENI of one of those addresses: an IPv4 ENI's subnets are its
// addresses' prefixes, so only a link with a prefix that holds the
// address; an IPv6 ENI may learn its subnet from a route, so any link
// with a global IPv6 address.
func readNode(k kernel.API, fam kernel.Family, rules []kernel.Rule, addrsFor []netip.Addr) (*Node, error) {
	addrs, err := k.AddrList(0, fam)
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	n := &Node{own: map[netip.Addr]int{}, k: k, names: map[int]string{}}
	prefixes := map[int][]netip.Prefix{}
	byAddr := map[netip.Addr]int{}
	// Only links with a global address can be ENIs (their host veths carry
	// only link-local addresses), and with addrsFor only some of those.
	candidates := map[int]bool{}
	for _, a := range addrs {
		p, ok := kernel.Prefix(a.IPNet)
		if !ok || !p.Addr().IsGlobalUnicast() {
			continue
		}
		n.own[p.Addr()] = a.LinkIndex
		byAddr[p.Addr()] = a.LinkIndex
		prefixes[a.LinkIndex] = append(prefixes[a.LinkIndex], p.Masked())
		if addrsFor == nil || p.Addr().Is6() || slices.ContainsFunc(addrsFor, p.Masked().Contains) {
			candidates[a.LinkIndex] = true
		}
	}
	table := map[int]int{} // link index -> its pods' table
	for _, r := range rules {
		if r.Priority != PrioENI || !onlySelectors(r, true, false, false) || !IsPodTable(r.Table) {
			continue
		}
		if p, ok := kernel.Prefix(r.Src); ok && p.IsSingleIP() {
			if idx, ok := byAddr[p.Addr()]; ok && candidates[idx] {
				table[idx] = r.Table
			}
		}
	}
	// Only main's routes of the candidates say anything more about the
	// ENIs here, and only for a link without rule 32765 or with IPv6
	// addresses. They are listed link by link, filtered by the kernel:
	// main also holds every pod's host route, a thousand-odd lines to
	// parse on a full node.
	var routes []kernel.Route
	for _, idx := range slices.Sorted(maps.Keys(candidates)) {
		if _, secondary := table[idx]; secondary && fam == kernel.FamilyV4 {
			continue
		}
		rs, err := k.RouteListLink(fam, kernel.TableMain, idx)
		if err != nil && !kernel.IsNotFound(err) {
			return nil, fmt.Errorf("list the routes of the node's link %d: %w", idx, err)
		}
		routes = append(routes, rs...)
	}
	for _, r := range routes {
		if r.Table == kernel.TableMain && isDefault(r) && r.LinkIndex != 0 {
			if _, secondary := table[r.LinkIndex]; !secondary {
				table[r.LinkIndex] = kernel.TableMain
			}
		}
	}
	for _, r := range routes {
		// An IPv6 ENI may carry only a /128 and learn its subnet from a
		// router advertisement as an on-link route in main. IPv4 ENIs carry
		// their subnet's length on their address (ipamd even removes a
		// secondary ENI's subnet route), so an IPv4 route proves nothing.
		if _, eni := table[r.LinkIndex]; !eni || r.Table != kernel.TableMain || r.Gw != nil || r.Dst == nil {
			continue
		}
		if p, ok := kernel.Prefix(r.Dst); ok && p.Addr().Is6() && !p.IsSingleIP() && p.Addr().IsGlobalUnicast() {
			prefixes[r.LinkIndex] = append(prefixes[r.LinkIndex], p.Masked())
		}
	}
	for idx, t := range table {
		subnets := slices.Compact(sortedPrefixes(prefixes[idx]))
		if len(subnets) > 0 {
			n.ENIs = append(n.ENIs, ENI{Link: n.name(idx), Table: t, Subnets: subnets})
		}
	}
	sort.Slice(n.ENIs, func(i, j int) bool { return n.ENIs[i].Link < n.ENIs[j].Link })
	return n, nil
}

func isDefault(r kernel.Route) bool {
	if r.Dst == nil {
		return true
	}
	p, ok := kernel.Prefix(r.Dst)
	return ok && p.Bits() == 0
}

func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

// PodTables returns the tables a pod holding address a may use on this
// node: the table of every ENI whose subnet holds a (several when ENIs
// share a subnet, as they often do on EC2). It returns none, with the
// reason, for an address no ENI's subnet holds, for an address the node
// itself carries (an ENI's primary address, the node's own), and for one
// that cannot be a pod's at all.
func (n *Node) PodTables(a netip.Addr) ([]int, error) {
	if !ValidPodAddr(a) {
		return nil, fmt.Errorf("%s cannot be a pod address (not a global unicast address)", a)
	}
	if link, own := n.own[a]; own {
		return nil, fmt.Errorf("%s is the node's own address (on %s)", a, n.name(link))
	}
	var tables []int
	for _, e := range n.ENIs {
		for _, p := range e.Subnets {
			if p.Contains(a) && !slices.Contains(tables, e.Table) {
				tables = append(tables, e.Table)
			}
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("%s is in no subnet of this node's ENIs (%s)", a, n.describe())
	}
	slices.Sort(tables)
	return tables, nil
}

// IsOwnAddress reports whether a node link carries the address.
func (n *Node) IsOwnAddress(a netip.Addr) bool {
	_, own := n.own[a]
	return own
}

func (n *Node) describe() string {
	if len(n.ENIs) == 0 {
		return "none found: no default route in main and no rule 32765"
	}
	s := make([]string, len(n.ENIs))
	for i, e := range n.ENIs {
		s[i] = e.String()
	}
	return strings.Join(s, "; ")
}
