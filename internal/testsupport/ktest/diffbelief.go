package ktest

import (
	"net"
	"sort"
)

// belief is what the generator expects the machine to hold after the ops
// it has made so far, kept roughly (an op it believes succeeds may fail):
// it only steers the picks towards objects that exist, so that sequences
// reach states worth comparing instead of failing with ENODEV throughout.
// It decides nothing the comparison depends on.
type belief struct {
	links map[string]map[string]*blink // namespace -> link name -> link
	addrs map[string][]Addr            // namespace -> addresses added
}

type blink struct {
	up           bool
	peerNS, peer string // veths
}

func newBelief() *belief {
	return &belief{links: map[string]map[string]*blink{}, addrs: map[string][]Addr{}}
}

func (b *belief) live(ns string) bool { _, ok := b.links[ns]; return ok }

func (b *belief) link(ns, name string) *blink {
	if b.links[ns] == nil {
		return nil
	}
	return b.links[ns][name]
}

// liveNS lists the live namespaces the ops drive (vpc is left alone).
func (b *belief) liveNS() []string {
	var out []string
	for ns := range b.links {
		if ns != "vpc" {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// linkNames lists a namespace's links, lo left out, that keep passes.
func (b *belief) linkNames(ns string, keep func(name string, l *blink) bool) []string {
	var out []string
	for name, l := range b.links[ns] {
		if name != "lo" && (keep == nil || keep(name, l)) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func validName(s string) bool { return s != "" && len(s) <= 15 }

func (b *belief) delLink(ns, name string) {
	l := b.link(ns, name)
	if l == nil {
		return
	}
	delete(b.links[ns], name)
	keep := b.addrs[ns][:0]
	for _, a := range b.addrs[ns] {
		if a.Link != name {
			keep = append(keep, a)
		}
	}
	b.addrs[ns] = keep
	if l.peer != "" {
		b.delLink(l.peerNS, l.peer)
	}
}

// note updates the belief with an op as if it succeeds where the belief
// says it can.
func (b *belief) note(op Op) {
	switch o := op.(type) {
	case NsAdd:
		if !b.live(o.NS) {
			b.links[o.NS] = map[string]*blink{"lo": {up: true}}
		}
	case NsDel:
		for name := range b.links[o.NS] {
			b.delLink(o.NS, name)
		}
		delete(b.links, o.NS)
		delete(b.addrs, o.NS)
	case Veth:
		if !b.live(o.NS) || !b.live(o.PeerNS) || !validName(o.Name) || !validName(o.Peer) ||
			b.link(o.NS, o.Name) != nil || b.link(o.PeerNS, o.Peer) != nil || (o.NS == o.PeerNS && o.Name == o.Peer) {
			return
		}
		b.links[o.NS][o.Name] = &blink{up: o.Up, peerNS: o.PeerNS, peer: o.Peer}
		b.links[o.PeerNS][o.Peer] = &blink{up: o.Up, peerNS: o.NS, peer: o.Name}
	case Bridge:
		if b.live(o.NS) && validName(o.Name) && b.link(o.NS, o.Name) == nil {
			b.links[o.NS][o.Name] = &blink{}
		}
	case Vlan:
		if b.live(o.NS) && validName(o.Name) && b.link(o.NS, o.Name) == nil && b.link(o.NS, o.Parent) != nil {
			b.links[o.NS][o.Name] = &blink{}
		}
	case LinkUp:
		if l := b.link(o.NS, o.Name); l != nil {
			l.up = true
		}
	case LinkDel:
		if o.Name != "lo" {
			b.delLink(o.NS, o.Name)
		}
	case Addr:
		if b.link(o.NS, o.Link) == nil {
			return
		}
		if !o.Del {
			b.addrs[o.NS] = append(b.addrs[o.NS], o)
			return
		}
		keep := b.addrs[o.NS][:0]
		for _, a := range b.addrs[o.NS] {
			if a.Link != o.Link || a.Prefix != o.Prefix {
				keep = append(keep, a)
			}
		}
		b.addrs[o.NS] = keep
	}
}

// addrsOf lists a namespace's addresses of a family (IPv4 or not).
func (b *belief) addrsOf(ns string, v4 bool) []Addr {
	var out []Addr
	for _, a := range b.addrs[ns] {
		if (Prefix(a.Prefix).IP.To4() != nil) == v4 {
			out = append(out, a)
		}
	}
	return out
}

// neighbourOf is another address in an address's subnet (the .1 of an
// IPv4 /24, ::1 of an IPv6 /64), a gateway candidate; "" for a host
// prefix.
func neighbourOf(prefix string) string {
	p := Prefix(prefix)
	ones, bits := p.Mask.Size()
	if ones == bits {
		return ""
	}
	gw := append(net.IP(nil), p.IP.Mask(p.Mask)...)
	gw[len(gw)-1] |= 1
	if gw.Equal(p.IP) {
		gw[len(gw)-1] |= 2
	}
	return gw.String()
}
