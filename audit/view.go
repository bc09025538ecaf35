package audit

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// nodeView is one reading of the node namespace.
type nodeView struct {
	node  *ownership.Node
	scope ownership.Scope
	rules []kernel.Rule
	links map[string]kernel.Link
	// veths are the pods' host veths by name.
	veths map[string]kernel.Link
	// routed are the main table's host routes to pod veths, by address;
	// vethAddrs the addresses routed to each veth.
	routed    map[netip.Addr]string
	vethAddrs map[string][]netip.Addr
}

func readNode(in Input) (*nodeView, error) {
	node, err := ownership.ReadNode(in.Node)
	if err != nil {
		return nil, err
	}
	v := &nodeView{node: node, scope: ownership.Scope{Node: node}, links: map[string]kernel.Link{}, veths: map[string]kernel.Link{},
		routed: map[netip.Addr]string{}, vethAddrs: map[string][]netip.Addr{}}
	// The scope is the node's word alone, as the plugin's teardown asks
	// it: narrowed by ipamd's pool, a #2048 rule whose address ipamd gave
	// back to EC2 (and another node now holds) would be no pod's, and the
	// leak that misroutes to that node would never be found.
	if v.rules, err = in.Node.RuleList(kernel.FamilyAll); err != nil {
		return nil, fmt.Errorf("list the node's rules: %w", err)
	}
	links, err := in.Node.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list the node's links: %w", err)
	}
	prefixes := append(slices.Clone(in.VethPrefixes), ownership.StrictVethPrefix)
	byIndex := map[int]string{}
	for _, l := range links {
		v.links[l.Name] = l
		if ownership.IsHostVeth(l.Name, prefixes) {
			v.veths[l.Name] = l
			byIndex[l.Index] = l.Name
		}
	}
	routes, err := in.Node.RouteList(kernel.FamilyAll, kernel.TableMain)
	if err != nil {
		return nil, fmt.Errorf("list the node's routes: %w", err)
	}
	for _, r := range routes {
		name, ok := byIndex[r.LinkIndex]
		if !ok || r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits {
			continue
		}
		if ip, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ip = ip.Unmap()
			v.routed[ip] = name
			v.vethAddrs[name] = append(v.vethAddrs[name], ip)
		}
	}
	return v, nil
}

// linkName names a link by its index ("link N" when it is not listed).
func (v *nodeView) linkName(idx int) string {
	for _, l := range v.links {
		if l.Index == idx {
			return l.Name
		}
	}
	return fmt.Sprintf("link %d", idx)
}

// liveness is what the runtime says of a pod veth's sandbox.
type liveness int

const (
	// unknown: the runtime was not asked; the veth is taken for a live
	// pod's (a veth outlives its pod only when a DEL failed).
	unknown liveness = iota
	// live: a ready sandbox of the veth's pod.
	live
	// pending: only a stopped sandbox of the pod: the runtime still
	// retries its DEL, so its objects are neither required nor leaked yet.
	pending
	// gone: no sandbox of the veth's pod at all.
	gone
)

type auditor struct {
	in      Input
	v       *nodeView
	holders map[netip.Addr][]held
	out     []Finding
	// forwarding caches the node's forwarding sysctls, by key.
	forwarding map[string]bool
}

// held is one source's word on who holds an address.
type held struct {
	Holder
	source string // "checkpoint" or "ipamd"
}

func holdersOf(in Input) map[netip.Addr][]held {
	out := map[netip.Addr][]held{}
	for _, a := range in.Allocations {
		ip, err := a.Addr()
		if err != nil {
			continue
		}
		out[ip] = append(out[ip], held{Holder{ContainerID: a.ContainerID, PodNamespace: a.Metadata.K8SPodNamespace, PodName: a.Metadata.K8SPodName}, "checkpoint"})
	}
	if in.Ipamd != nil {
		for ip, h := range in.Ipamd.Held {
			out[ip] = append(out[ip], held{h, "ipamd"})
		}
	}
	return out
}

// vethLiveness asks the runtime's list about a pod veth: its name is a
// hash of its pod's namespace and name.
func (a *auditor) vethLiveness(veth string) liveness {
	if a.in.Sandboxes == nil {
		return unknown
	}
	state := gone
	for _, s := range a.in.Sandboxes {
		if !ownership.HasPodSuffix(veth, s.Namespace, s.Name) {
			continue
		}
		if s.Ready {
			return live
		}
		state = pending
	}
	return state
}

// sandboxLiveness is vethLiveness for an allocation's container ID.
func (a *auditor) sandboxLiveness(id string) liveness {
	if a.in.Sandboxes == nil {
		return unknown
	}
	state := gone
	for _, s := range a.in.Sandboxes {
		if s.ID != id {
			continue
		}
		if s.Ready {
			return live
		}
		state = pending
	}
	return state
}

// routedLive: the address is routed to a pod veth whose pod is not known
// to be gone.
func (a *auditor) routedLive(ip netip.Addr) bool {
	veth, ok := a.v.routed[ip]
	return ok && a.vethLiveness(veth) != gone
}

// unroutedVeths are the pod veths, not of a strict branch pod (whose
// route is in its VLAN table), routed no address while the runtime does
// not call their pod gone or stopped: a live pod that lost its host route.
func (a *auditor) unroutedVeths() []string {
	var out []string
	for _, name := range sortedKeys(a.v.veths) {
		if len(a.v.vethAddrs[name]) > 0 || ownership.IsBranchHostVeth(name) {
			continue
		}
		if st := a.vethLiveness(name); st == live || st == unknown {
			out = append(out, name)
		}
	}
	return out
}

// allocationsRead: the checkpoint or ipamd's memory was read, so "no
// allocation holds it" is known, not merely unasked.
func (a *auditor) allocationsRead() bool { return a.in.Allocations != nil || a.in.Ipamd != nil }

// isBranch: the address is a standard branch pod's (its 1536 rule uses a
// VLAN table): ipamd never holds those, the pod's annotation does.
func (a *auditor) isBranch(ip netip.Addr) bool {
	for _, r := range a.v.rules {
		if ownership.IsFromPod(r, ip) && ownership.IsVlanTable(r.Table) {
			return true
		}
	}
	return false
}

func (a *auditor) add(f Finding) { a.out = append(a.out, f) }
