// Package model is an in-memory model of Linux networking that implements
// kernel.API. The scenario harness runs on it: it is fast, needs no root,
// is safe for concurrent use (one mutex per Kernel) and can be inspected
// or cloned at any moment.
//
// Its semantics follow Linux where they matter for leaks, and were
// measured on a real kernel (6.x) by the kernel/linux tests, which run the
// same operations on both and compare errnos and dumps; TestDifferential
// there runs random sequences of them (internal/testsupport/ktest) and shrinks any
// disagreement to the shortest sequence that shows it, and
// TestDifferentialRegressions keeps every one it found:
//
//   - deleting a namespace deletes its links and their veth peers in other
//     namespaces; deleting a link deletes its routes (every table), its
//     addresses, neighbours and sysctls, its VLAN children and its veth
//     peer; rules survive the deletion of the device they name, which is
//     why rules leak and routes do not;
//   - a duplicate add is EEXIST, and for a rule "duplicate" treats the
//     new rule's unset addresses as wildcards; deleting a missing rule is
//     ENOENT, a missing route ESRCH (the IPv6 default route of a table
//     that has none, ENOENT), a missing address EADDRNOTAVAIL, a missing
//     link ENODEV; a link name over 15 bytes is ERANGE, an empty one
//     EINVAL;
//   - an address brings its local-table route and, once its link is up,
//     its connected route; deleting the last IPv4 address of a link flushes
//     the link's IPv4 routes and neighbours, as Linux does;
//   - RouteGet walks the rules by priority, then takes the longest prefix;
//     until the rules change Linux takes a fast path past them (IPv4 with
//     local and main merged), and so does the model (lookup.go).
//
// What is not modelled: IPv6 DAD (addresses are never tentative),
// automatic IPv6 link-local addresses and their fe80::/64 routes,
// broadcast and multicast routes of the local table, rp_filter, TOS,
// multipath, bridge ports, and Linux moving physical devices of a deleted
// namespace back to the initial one (the model deletes them with the
// namespace). Nor is carrier: a link is usable as soon as it is up (with
// DAD off, Linux too makes an IPv6 address on a link without carrier
// usable at once; with DAD on it stays tentative). Nor are user routes of
// type local (kernel.Route.Type on add), which would make Linux check
// martian sources the slow way (fib_has_custom_local_routes); the
// differential suite makes none.
package model

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// Kernel holds every namespace of a simulated machine.
type Kernel struct {
	mu     sync.Mutex
	ns     map[string]*netns
	macSeq uint32
	gen    uint64 // changes made so far (Generation)
}

// Generation counts the changes made to the machine: two reads of it
// that agree mean nothing (link, address, route, rule, neighbour,
// sysctl, namespace) changed in between.
func (k *Kernel) Generation() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.gen
}

type netns struct {
	path      string
	links     map[int]*link
	names     map[string]*link // links by name (byName)
	nextIndex int
	addrs     []kernel.Addr
	routes    []route
	rules     []kernel.Rule // in priority order, ties in insertion order
	neighs    []kernel.Neigh
	sysctl    map[string]string // namespace-wide keys written (see sysctl.go)
	// tables that exist, per family as in Linux (a route add creates its
	// table, an IPv6 rule its table, an IPv4 rule without a table
	// allocates one): an IPv4 rule added without a table gets the first
	// id free among the IPv4 tables, and deleting the IPv6 default route
	// answers ENOENT rather than ESRCH when its table exists (routes.go).
	tables map[table]bool
	// v4CustomRules: an IPv4 rule was added or deleted; v6CustomRules: an
	// IPv6 rule was added (a delete does not count). Until then Linux's
	// lookups take a fast path that ignores the rules, and for IPv4 keeps
	// the local and main tables merged, so that a local route answers as
	// main (lookup.go).
	v4CustomRules, v6CustomRules bool
	// idx is the last index RouteGet built; cur the one the RouteGet in
	// progress reads (nil outside RouteGet: see lookupIndex).
	idx, cur *lookupIndex
}

// route is a route as the model keeps it: what kernel.Route shows, and
// what Linux keeps of its nexthop besides. hostGw: the gateway was a
// local address when the route was added, so it resolved through a
// host-scope route, the nexthop has host scope, and lookups answer with
// the device and no gateway (rt_set_nexthop); Linux decides it then and
// keeps it.
type route struct {
	kernel.Route
	hostGw bool
}

// table is a routing table of one family.
type table struct {
	fam kernel.Family
	id  int
}

type link struct {
	kernel.Link
	peerNS *netns // veth: the namespace of the peer
	// sysctl holds the link's keys that differ from the defaults, by
	// "ipv4/conf/<leaf>"; explicit the IPv4 conf leaves written directly,
	// which Linux no longer updates from conf/default.
	sysctl   map[string]string
	explicit map[string]bool
}

// New returns a machine without namespaces.
func New() *Kernel { return &Kernel{ns: map[string]*netns{}} }

// AddNamespace creates a namespace holding lo (index 1, down; 127.0.0.1/8
// and ::1 appear when it is set up) and the default rules: IPv4 0 local,
// 32766 main, 32767 default; IPv6 0 local, 32766 main.
func (k *Kernel) AddNamespace(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	if path == "" {
		return fmt.Errorf("namespace path is empty: %w", syscall.EINVAL)
	}
	if _, ok := k.ns[path]; ok {
		return fmt.Errorf("namespace %s: %w", path, syscall.EEXIST)
	}
	n := &netns{path: path, links: map[int]*link{}, names: map[string]*link{}, nextIndex: 1, sysctl: map[string]string{}, tables: map[table]bool{}}
	for _, f := range []kernel.Family{kernel.FamilyV4, kernel.FamilyV6} {
		n.tables[table{f, kernel.TableMain}], n.tables[table{f, kernel.TableLocal}] = true, true
	}
	n.addLink(&link{Link: kernel.Link{Name: "lo", Kind: kernel.KindLoopback, MTU: 65536}})
	for _, f := range []kernel.Family{kernel.FamilyV4, kernel.FamilyV6} {
		n.rules = append(n.rules, kernel.Rule{Priority: 0, Family: f, Table: kernel.TableLocal},
			kernel.Rule{Priority: 32766, Family: f, Table: kernel.TableMain})
	}
	n.rules = append(n.rules, kernel.Rule{Priority: 32767, Family: kernel.FamilyV4, Table: kernel.TableDefault})
	n.sortRules()
	k.ns[path] = n
	return nil
}

// DeleteNamespace removes a namespace and everything in it, including the
// veth peers its links had in other namespaces (with their routes,
// addresses and neighbours). Handles on it fail with ErrNamespaceGone from
// then on, even if a namespace with the same path is created again.
func (k *Kernel) DeleteNamespace(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	n, ok := k.ns[path]
	if !ok {
		return fmt.Errorf("namespace %s: %w", path, kernel.ErrNamespaceGone)
	}
	for _, idx := range n.indexes() {
		if l, ok := n.links[idx]; ok {
			n.delLink(l)
		}
	}
	delete(k.ns, path)
	return nil
}

// HasNamespace reports whether the namespace exists.
func (k *Kernel) HasNamespace(path string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.ns[path]
	return ok
}

// Namespaces lists the namespaces, sorted.
func (k *Kernel) Namespaces() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.ns))
	for p := range k.ns {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Open returns a handle bound to the namespace now at path; an unknown path
// is an error wrapping kernel.ErrNamespaceGone.
func (k *Kernel) Open(path string) (kernel.API, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok := k.ns[path]
	if !ok {
		return nil, fmt.Errorf("open %s: %w", path, kernel.ErrNamespaceGone)
	}
	return &handle{k: k, path: path, n: n}, nil
}

// Opener returns an Opener whose empty path is nodePath: the namespace the
// plugin and ipamd "run in".
func (k *Kernel) Opener(nodePath string) kernel.Opener { return opener{k: k, node: nodePath} }

type opener struct {
	k    *Kernel
	node string
}

func (o opener) Open(path string) (kernel.API, error) {
	if path == "" {
		path = o.node
	}
	return o.k.Open(path)
}

// AddDevice creates a stand-in for a physical NIC (an ENI), down, of Kind
// "device". mtu 0 is 1500; mac nil gets a generated address.
func (k *Kernel) AddDevice(nsPath, name string, mtu int, mac net.HardwareAddr) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	n, ok := k.ns[nsPath]
	if !ok {
		return 0, fmt.Errorf("namespace %s: %w", nsPath, kernel.ErrNamespaceGone)
	}
	if err := n.checkNewName(name); err != nil {
		return 0, err
	}
	if mtu == 0 {
		mtu = 1500
	}
	if err := checkMTU(mtu); err != nil {
		return 0, err
	}
	l := &link{Link: kernel.Link{Name: name, Kind: kernel.KindDevice, MTU: mtu, HardwareAddr: k.mac(mac)}}
	n.addLink(l)
	return l.Index, nil
}

// Clone returns a deep copy of the machine, for snapshots: the copy shares
// nothing with the original, and handles opened on one do not reach the
// other.
func (k *Kernel) Clone() *Kernel {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := &Kernel{ns: make(map[string]*netns, len(k.ns)), macSeq: k.macSeq, gen: k.gen}
	remap := make(map[*netns]*netns, len(k.ns))
	for p, n := range k.ns {
		m := &netns{path: n.path, links: make(map[int]*link, len(n.links)), names: make(map[string]*link, len(n.links)), nextIndex: n.nextIndex,
			sysctl: make(map[string]string, len(n.sysctl)), tables: make(map[table]bool, len(n.tables)),
			v4CustomRules: n.v4CustomRules, v6CustomRules: n.v6CustomRules}
		for _, a := range n.addrs {
			m.addrs = append(m.addrs, copyAddr(a))
		}
		for _, r := range n.routes {
			m.routes = append(m.routes, route{copyRoute(r.Route), r.hostGw})
		}
		for _, r := range n.rules {
			m.rules = append(m.rules, copyRule(r))
		}
		for _, nb := range n.neighs {
			m.neighs = append(m.neighs, copyNeigh(nb))
		}
		for key, v := range n.sysctl {
			m.sysctl[key] = v
		}
		for t := range n.tables {
			m.tables[t] = true
		}
		c.ns[p] = m
		remap[n] = m
	}
	for p, n := range k.ns {
		m := c.ns[p]
		for i, l := range n.links {
			c := &link{Link: copyLink(l.Link), peerNS: remap[l.peerNS]}
			if l.sysctl != nil {
				c.sysctl = make(map[string]string, len(l.sysctl))
				for key, v := range l.sysctl {
					c.sysctl[key] = v
				}
			}
			if l.explicit != nil {
				c.explicit = make(map[string]bool, len(l.explicit))
				for key, v := range l.explicit {
					c.explicit[key] = v
				}
			}
			m.links[i] = c
			m.names[c.Name] = c
		}
	}
	return c
}

// mac returns a copy of the given address or a fresh locally administered
// one, unique within the machine.
func (k *Kernel) mac(m net.HardwareAddr) net.HardwareAddr {
	if len(m) != 0 {
		return cloneMAC(m)
	}
	k.macSeq++
	s := k.macSeq
	return net.HardwareAddr{0x0a, 0x58, byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}
}
