package playback

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/journal"
)

// The journal does not record the node, only what ipamd said of its pods'
// addresses. The plugin's teardown trusts the node alone for which
// addresses are pods' (ownership.Node), so the replay rebuilds the node's
// ENIs from those answers, as the instance's OS and ipamd would have made
// them: ENI device d is the link eth<d> (ifindex d+2, lo being 1, which is
// also what a branch reply's ParentIfIndex names); its subnet is the
// widest of /24 (IPv4) or /64 (IPv6) and the common prefix of its pods'
// addresses; its own address is the highest host of the subnet no pod
// used; device 0 carries the default routes, the others rule 32765 to the
// table ipamd named.

// eniSeen is what the journal says of one ENI.
type eniSeen struct {
	addrs []netip.Addr
	table int
}

// enisOf collects, per device number, the addresses and table of every
// AddNetwork, DelNetwork and ListAllocations answer, and the highest
// trunk ifindex a branch answer named.
func enisOf(entries []journal.Entry) (map[int]*eniSeen, int) {
	seen := map[int]*eniSeen{}
	add := func(device, table int, ip string) {
		a, err := netip.ParseAddr(ip)
		if err != nil || device < 0 || device > 1023 || !ownership.ValidPodAddr(a) {
			return
		}
		e := seen[device]
		if e == nil {
			e = &eniSeen{table: ownership.ENITable(device)}
			seen[device] = e
		}
		if table != 0 && ownership.IsPodTable(table) {
			e.table = table
		}
		e.addrs = append(e.addrs, a)
	}
	meta := func(ms []*rpc.IPAllocationMetadata) {
		for _, m := range ms {
			ip := m.GetIPv4Addr()
			if ip == "" {
				ip = m.GetIPv6Addr()
			}
			add(int(m.GetDeviceNumber()), int(m.GetRouteTableId()), ip)
		}
	}
	trunk := 0
	for _, e := range entries {
		for _, c := range e.Ipamd {
			if c.Reply == nil {
				continue
			}
			switch c.Method {
			case "AddNetwork":
				var r rpc.AddNetworkReply
				if unmarshalReply(c.Reply, &r) == nil {
					meta(r.GetIPAllocationMetadata())
					trunk = max(trunk, int(r.GetParentIfIndex()))
				}
			case "DelNetwork":
				var r rpc.DelNetworkReply
				if unmarshalReply(c.Reply, &r) == nil {
					meta(r.GetIPAllocationMetadata())
				}
			case "ListAllocations":
				var r rpc.ListAllocationsReply
				if unmarshalReply(c.Reply, &r) == nil {
					for _, a := range r.GetAllocations() {
						add(int(a.GetDeviceNumber()), int(a.GetRouteTable()), a.GetIp())
					}
				}
			}
		}
	}
	return seen, trunk
}

// plugNode makes the node's ENI links and configures them.
func plugNode(k *model.Kernel, entries []journal.Entry) error {
	seen, trunk := enisOf(entries)
	if trunk > 4096 {
		return fmt.Errorf("a branch ENI's trunk has ifindex %d; the replay makes stand-ins up to 4096", trunk)
	}
	highest := trunk - 2
	for d := range seen {
		highest = max(highest, d)
	}
	h, err := k.Open(NodeNS)
	if err != nil {
		return err
	}
	defer h.Close()
	for d := 0; d <= highest; d++ {
		name := fmt.Sprintf("eth%d", d)
		idx, err := k.AddDevice(NodeNS, name, 9001, nil)
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(name); err != nil {
			return err
		}
		if e := seen[d]; e != nil {
			if err := configureENI(h, d, idx, e); err != nil {
				return fmt.Errorf("ENI device %d: %w", d, err)
			}
		}
	}
	return nil
}

// configureENI gives an ENI its subnet address per family, and its
// routing: the default routes on the primary ENI, rule 32765 elsewhere.
func configureENI(h kernel.API, device, idx int, e *eniSeen) error {
	for _, v4 := range []bool{true, false} {
		var fam []netip.Addr
		for _, a := range e.addrs {
			if a.Is4() == v4 {
				fam = append(fam, a)
			}
		}
		if len(fam) == 0 {
			continue
		}
		subnet := commonPrefix(fam)
		own, ok := unusedHost(subnet, fam)
		if !ok {
			return fmt.Errorf("no free address in %s for the ENI itself", subnet)
		}
		if err := h.AddrAdd(idx, ownership.IPNet(netip.PrefixFrom(own, subnet.Bits()))); err != nil {
			return err
		}
		if device == 0 {
			gw, f := net.IP(subnet.Addr().Next().AsSlice()), kernel.FamilyV4
			if !v4 {
				gw, f = net.ParseIP("fe80::1"), kernel.FamilyV6
			}
			if err := h.RouteAdd(kernel.Route{Table: kernel.TableMain, Gw: gw, LinkIndex: idx, Family: f}); err != nil {
				return err
			}
		} else if v4 {
			r := kernel.Rule{Priority: ownership.PrioENI, Family: kernel.FamilyV4, Src: ownership.IPNet(ownership.HostPrefix(own)), Table: e.table}
			if err := h.RuleAdd(r); err != nil && !kernel.IsExist(err) {
				return err
			}
		}
	}
	return nil
}

// commonPrefix is the longest prefix holding every address, at most /24
// (IPv4) or /64 (IPv6) long.
func commonPrefix(addrs []netip.Addr) netip.Prefix {
	bits := 24
	if addrs[0].Is6() {
		bits = 64
	}
	for ; bits > 0; bits-- {
		p := netip.PrefixFrom(addrs[0], bits).Masked()
		if !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !p.Contains(a) }) {
			return p
		}
	}
	return netip.PrefixFrom(addrs[0], 0).Masked()
}

// unusedHost is the highest address of the subnet (below the IPv4
// broadcast) that none of used is.
func unusedHost(subnet netip.Prefix, used []netip.Addr) (netip.Addr, bool) {
	a := lastAddr(subnet)
	if a.Is4() {
		a = a.Prev() // the broadcast address
	}
	for i := 0; i < 4096 && subnet.Contains(a) && a != subnet.Addr(); a, i = a.Prev(), i+1 {
		if !slices.Contains(used, a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		host := p.Bits() - 8*i // bits of this byte that are the prefix's
		switch {
		case host <= 0:
			b[i] = 0xff
		case host < 8:
			b[i] |= 0xff >> host
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
