// Package model is an in-memory model of Linux networking that implements
// kernel.API. The scenario harness runs on it: it is fast, needs no root
// and can be inspected at any moment.
//
// Its semantics follow Linux where they matter for leaks: deleting a
// namespace deletes its links and their veth peers; deleting a link deletes
// its routes, addresses, neighbours and VLAN children; rules survive the
// deletion of the device they name (that is why rules leak and routes do
// not); a duplicate add is EEXIST, a delete of something missing is ENOENT
// (rules), ESRCH (routes) or ENODEV (links); names over 15 bytes are
// ERANGE (as Linux answers, measured); route lookups walk the rules by priority and take the longest
// prefix. The real-kernel tests compare it with Linux.
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
}

type netns struct {
	path      string
	links     map[int]*link
	nextIndex int
	addrs     []kernel.Addr
	routes    []kernel.Route
	rules     []kernel.Rule // kept in priority order, ties in insertion order
	neighs    []kernel.Neigh
	sysctl    map[string]string
}

type link struct {
	kernel.Link
	peerNS *netns // veth: the peer's namespace
}

// New returns an empty machine.
func New() *Kernel { return &Kernel{ns: map[string]*netns{}} }

// AddNamespace creates a namespace holding a down loopback and the
// default rules of both families.
func (k *Kernel) AddNamespace(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if path == "" {
		return fmt.Errorf("namespace path is empty: %w", syscall.EINVAL)
	}
	if _, ok := k.ns[path]; ok {
		return fmt.Errorf("namespace %s: %w", path, syscall.EEXIST)
	}
	n := &netns{path: path, links: map[int]*link{}, nextIndex: 1, sysctl: map[string]string{}}
	n.addLink(&link{Link: kernel.Link{Name: "lo", Kind: kernel.KindLoopback, MTU: 65536, HardwareAddr: make(net.HardwareAddr, 6)}})
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
// veth peers its links had in other namespaces. Rules, being per
// namespace, go with it.
func (k *Kernel) DeleteNamespace(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
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
	var out []string
	for p := range k.ns {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Open returns a handle on a namespace.
func (k *Kernel) Open(path string) (kernel.API, error) {
	if !k.HasNamespace(path) {
		return nil, fmt.Errorf("open %s: %w", path, kernel.ErrNamespaceGone)
	}
	return &handle{k: k, path: path}, nil
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

// AddDevice creates a stand-in for a physical NIC (an ENI), down.
func (k *Kernel) AddDevice(nsPath, name string, mtu int, mac net.HardwareAddr) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok := k.ns[nsPath]
	if !ok {
		return 0, fmt.Errorf("namespace %s: %w", nsPath, kernel.ErrNamespaceGone)
	}
	if err := n.checkNewName(name); err != nil {
		return 0, err
	}
	l := &link{Link: kernel.Link{Name: name, Kind: kernel.KindDevice, MTU: mtu, HardwareAddr: k.mac(mac)}}
	n.addLink(l)
	return l.Index, nil
}

// mac returns the given address or a fresh locally administered one.
func (k *Kernel) mac(m net.HardwareAddr) net.HardwareAddr {
	if len(m) == 6 {
		return append(net.HardwareAddr(nil), m...)
	}
	k.macSeq++
	s := k.macSeq
	return net.HardwareAddr{0x0a, 0x58, byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}
}

func (n *netns) addLink(l *link) {
	l.Index = n.nextIndex
	n.nextIndex++
	n.links[l.Index] = l
}

func (n *netns) indexes() []int {
	var idx []int
	for i := range n.links {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

func (n *netns) byName(name string) *link {
	for _, l := range n.links {
		if l.Name == name {
			return l
		}
	}
	return nil
}

func (n *netns) checkNewName(name string) error {
	// Linux answers ERANGE for a name over IFNAMSIZ-1 (the netlink
	// attribute is too long) and EINVAL for an empty one: measured by the
	// kernel/linux tests.
	if len(name) > kernel.MaxLinkNameLen {
		return fmt.Errorf("link name %q: %w", name, syscall.ERANGE)
	}
	if name == "" {
		return fmt.Errorf("link name %q: %w", name, syscall.EINVAL)
	}
	if n.byName(name) != nil {
		return fmt.Errorf("link %s: %w", name, syscall.EEXIST)
	}
	return nil
}

// delLink removes a link with everything that depends on it: its routes,
// addresses, neighbours and sysctls, its VLAN children, and its veth peer.
// Rules are left alone, as Linux does.
func (n *netns) delLink(l *link) {
	if _, ok := n.links[l.Index]; !ok {
		return
	}
	delete(n.links, l.Index)
	n.routes = filter(n.routes, func(r kernel.Route) bool { return r.LinkIndex != l.Index })
	n.addrs = filter(n.addrs, func(a kernel.Addr) bool { return a.LinkIndex != l.Index })
	n.neighs = filter(n.neighs, func(nb kernel.Neigh) bool { return nb.LinkIndex != l.Index })
	for key := range n.sysctl {
		if ifaceOfKey(key) == l.Name {
			delete(n.sysctl, key)
		}
	}
	for _, c := range n.links {
		if c.Kind == kernel.KindVlan && c.ParentIndex == l.Index {
			n.delLink(c)
		}
	}
	if l.Kind == kernel.KindVeth && l.peerNS != nil {
		if p, ok := l.peerNS.links[l.ParentIndex]; ok {
			p.peerNS = nil // stop the recursion
			l.peerNS.delLink(p)
		}
	}
}

func filter[T any](xs []T, keep func(T) bool) []T {
	out := xs[:0]
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
