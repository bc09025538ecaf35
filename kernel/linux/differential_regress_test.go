package linux

import (
	"net"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
)

// regressions are the disagreements TestDifferential found, each as the
// short sequence (after ktest.Preamble) that showed it, kept so that
// every run proves the model's fix against the real kernel; and a few
// neighbours of them that the fixes rely on. kernel/model's
// fidelity_test.go checks the same behaviours on the model alone.
var regressions = []struct {
	name string
	ops  []ktest.Op
}{
	{"rule add: unset selectors are wildcards", []ktest.Op{
		addRule("node", kernel.Rule{Priority: 512, Src: cidr("10.0.2.11/32"), Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}),
		addRule("node", kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32"), Table: kernel.TableMain}), // EEXIST
		addRule("node", kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Table: kernel.TableMain}),   // EEXIST
		addRule("node", kernel.Rule{Priority: 600, Dst: cidr("10.0.1.16/32"), Table: kernel.TableMain}),
		addRule("node", kernel.Rule{Priority: 600, Src: cidr("10.0.2.11/32"), Dst: cidr("10.0.1.16/32"), Table: kernel.TableMain}),
		addRule("node", kernel.Rule{Priority: 512, Src: cidr("2001:db8:2::11/128"), Table: 2}),
		addRule("node", kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Table: 2}), // EEXIST
		delRule("node", kernel.Rule{Priority: 512, Dst: cidr("10.0.1.15/32")}),
	}},
	{"rule add: default priority, then a duplicate of it", []ktest.Op{
		delRule("pod1", kernel.Rule{Family: kernel.FamilyV6, Table: kernel.TableMain}),
		addRule("pod1", kernel.Rule{Src: cidr("2001:db8:2::11/128"), Table: kernel.TableMain}),
		addRule("pod1", kernel.Rule{Family: kernel.FamilyV6, Table: kernel.TableMain}), // EEXIST at the same picked priority
	}},
	{"rule add: table 0 after the duplicate check; tables per family", []ktest.Op{
		addRule("node", kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Table: 1}),
		addRule("node", kernel.Rule{Priority: 512, Family: kernel.FamilyV4}), // a second "lookup 1"
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Table: 3, Family: kernel.FamilyV6, Scope: kernel.ScopeLink}, Link: "eth0"},
		addRule("node", kernel.Rule{Priority: 513, Mark: 0x80}), // IPv4 table 2, then 3: IPv6's 3 is no IPv4 table
		addRule("node", kernel.Rule{Priority: 514, Mark: 0x80}),
	}},
	{"route del: IPv6 default of a table that has none", []ktest.Op{
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Gw: ip("fe80::1")}, Link: "eth0"},
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6}},             // ENOENT
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6}, Link: "lo"}, // ENOENT
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6}, Link: "eth0"},
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6, Table: 2}},
		addRule("node", kernel.Rule{Priority: 100, Family: kernel.FamilyV4, Table: 3}),
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6, Table: 3}},
		addRule("node", kernel.Rule{Priority: 100, Src: cidr("2001:db8:2::11/128"), Dst: cidr("2001:db8:1::15/128"), Table: 2}),
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Family: kernel.FamilyV6, Table: 2}}, // ENOENT
	}},
	{"veth: names checked for emptiness, then length, then use", []ktest.Op{
		ktest.Veth{NS: "node", Name: "eth1", Peer: "", PeerNS: "node"},
		ktest.Veth{NS: "pod1", Name: "sixteen-chars-xx", Peer: "", PeerNS: "node"},
		ktest.Veth{NS: "node", Name: "eth0", Peer: "sixteen-chars-xx", PeerNS: "node"},
	}},
	{"neighbours on lo are 0.0.0.0's", []ktest.Op{
		ktest.Neigh{NS: "node", Link: "lo", IP: "10.0.1.1"},
		ktest.Neigh{NS: "node", Link: "lo", IP: "169.254.1.1"},
		ktest.Neigh{NS: "node", Link: "lo", IP: "2001:db8:1::1"},
	}},
	{"local and main merged until a rule changes", []ktest.Op{
		ktest.Addr{NS: "node", Link: "lo", Prefix: "10.0.2.10/16"},
		get("node", "10.0.1.15", "", ""),
		get("node", "10.0.2.10", "", ""),
		get("node", "10.0.1.1", "", ""),
		get("node", "127.0.0.1", "", ""),
		delRule("node", kernel.Rule{Priority: 32767, Family: kernel.FamilyV4}),
		get("node", "10.0.2.10", "", ""),
		get("node", "10.0.1.1", "", ""),
		get("node", "127.0.0.1", "", ""),
	}},
	{"IPv6 rules ignored until one is added", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:2::10/128"},
		delRule("node", kernel.Rule{Family: kernel.FamilyV6}),
		get("node", "2001:db8:2::10", "", "eth0"),
		get("node", "2001:db8:2::10", "", ""),
		addRule("node", kernel.Rule{Priority: 900, Family: kernel.FamilyV6, Table: 9}),
		get("node", "2001:db8:2::10", "", ""),
	}},
	{"a connected route beside a user route to the same prefix", []ktest.Op{
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("10.0.2.0/24"), Gw: ip("10.0.1.1")}, Link: "eth0"},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.2.10/24"},
		get("node", "10.0.2.1", "", ""),
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.2.10/24", Del: true},
	}},
	{"preferred source gone: with its address, with its link", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "10.0.2.10/24"},
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:2::10/64"},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.3.5/24"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("10.7.0.0/16"), Gw: ip("10.0.2.1"), Src: ip("10.0.3.5")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Table: 2, Dst: cidr("10.7.0.0/16"), Gw: ip("10.0.2.1"), Src: ip("10.0.3.5")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:9::/64"), Src: ip("2001:db8:1::10")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:8::/64"), Src: ip("2001:db8:1::10")}, Link: "eth0"},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.3.5/24", Del: true},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "2001:db8:1::10/64", Del: true},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "2001:db8:1::10/64"},
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.3.5/24"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:7::/64"), Src: ip("2001:db8:1::10")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Table: 3, Dst: cidr("10.6.0.0/16"), Gw: ip("10.0.2.1"), Src: ip("10.0.3.5")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("10.6.0.0/16"), Gw: ip("10.0.2.1"), Src: ip("10.0.3.5")}, Link: "eth1"},
		ktest.LinkDel{NS: "node", Name: "eth0"},
	}},
	{"an address on lo makes its subnet local", []ktest.Op{
		ktest.NsAdd{NS: "pod2"},
		ktest.Addr{NS: "pod2", Link: "lo", Prefix: "10.0.2.11/24"},
		ktest.Route{NS: "pod2", Verb: "add", R: kernel.Route{Dst: cidr("10.0.3.0/24"), Gw: ip("10.0.2.1"), Src: ip("10.0.2.10")}, Link: "lo"},
		ktest.Route{NS: "pod2", Verb: "add", R: kernel.Route{Dst: cidr("10.0.4.0/24"), Gw: ip("10.0.2.1"), Src: ip("10.0.5.10")}, Link: "lo"},
		get("pod2", "10.0.2.11", "10.0.2.10", ""),
		get("pod2", "10.0.3.1", "10.0.2.10", ""),
	}},
	{"martian sources, by address then through the rules", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "10.0.2.10/24"},
		ktest.Bridge{NS: "node", Name: "br0"},
		get("node", "10.1.0.9", "10.0.1.10", "br0"),
		get("node", "10.0.1.15", "10.0.1.10", "eth0"),
		get("node", "10.0.1.15", "10.0.2.10", "eth1"),
		delRule("node", kernel.Rule{Family: kernel.FamilyV4}),
		get("node", "10.1.0.9", "10.0.1.10", "br0"),
		get("node", "10.0.1.15", "10.0.1.10", "eth0"),
		addRule("node", kernel.Rule{Priority: 1, Family: kernel.FamilyV4, Table: kernel.TableLocal}),
		get("node", "10.0.1.15", "10.0.2.10", "eth1"),
	}},
	{"a local gateway is not used; a gateway's kind is kept", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.1.10/24", Del: true},
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "169.254.1.1/16"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("10.0.1.0/24"), Gw: ip("169.254.1.1"), Scope: kernel.ScopeLink, Priority: 100}, Link: "eth1"},
		get("node", "10.0.1.10", "", ""),
		ktest.Addr{NS: "node", Link: "eth0", Prefix: "10.0.1.10/24"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Gw: ip("10.0.1.1")}, Link: "eth0"},
		ktest.Addr{NS: "node", Link: "lo", Prefix: "10.0.2.11/16"},
		get("node", "10.1.2.3", "", ""),
		delRule("node", kernel.Rule{Family: kernel.FamilyV4}),
		get("node", "10.1.2.3", "10.0.2.11", "eth0"),
	}},
	{"IPv6: a route on lo does not make a gateway on-link", []ktest.Op{
		ktest.Route{NS: "pod1", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:1::/64"), Priority: 1024}, Link: "lo"},
		ktest.Route{NS: "pod1", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:1::15/128"), Gw: ip("2001:db8:1::1"), Priority: 5}},
		ktest.Route{NS: "pod1", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:1::16/128"), Gw: ip("2001:db8:1::1")}, Link: "lo"},
		get("pod1", "2001:db8:1::9", "", ""),
	}},
	{"IPv6: deleting an address deletes a user's route in place of its own", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:1::15/128"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:1::15/128")}, Link: "eth1"},
		ktest.Route{NS: "node", Verb: "del", R: kernel.Route{Dst: cidr("2001:db8:1::15/128")}, Link: "eth1"},
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:1::15/128", Del: true},
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:2::10/64"},
		ktest.Route{NS: "node", Verb: "add", R: kernel.Route{Dst: cidr("2001:db8:2::/64"), Priority: 5}, Link: "eth1"},
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:2::10/64", Del: true},
	}},
	{"IPv6 input lookups prefer the input link", []ktest.Op{
		ktest.Addr{NS: "node", Link: "eth1", Prefix: "2001:db8:1::15/64"},
		get("node", "2001:db8:1::9", "", "eth1"),
		get("node", "2001:db8:1::9", "", "eth0"),
		get("node", "2001:db8:1::9", "", ""),
		ktest.Addr{NS: "node", Link: "lo", Prefix: "2001:db8:1::16/64"}, // output lookups come from lo, prefer nothing
		get("node", "2001:db8:1::9", "", ""),
		get("node", "2001:db8:1::9", "", "lo"),
	}},
}

func addRule(ns string, r kernel.Rule) ktest.Op { return ktest.Rule{NS: ns, R: r} }
func delRule(ns string, r kernel.Rule) ktest.Op { return ktest.Rule{NS: ns, R: r, Del: true} }

func get(ns, dst, src, iif string) ktest.Op {
	q := kernel.RouteQuery{Dst: ip(dst), IifName: iif}
	if src != "" {
		q.Src = net.ParseIP(src)
	}
	return ktest.Get{NS: ns, Q: q}
}

// TestDifferentialRegressions runs each regression on Linux and on the
// model: outcomes and dumps must agree after every op.
func TestDifferentialRegressions(t *testing.T) {
	testns.Require(t)
	pair := ktest.Pair{NameA: "linux", NameB: "model", New: newDiffWorlds}
	for _, r := range regressions {
		t.Run(strings.ReplaceAll(r.name, " ", "_"), func(t *testing.T) {
			res, err := pair.Run(append(ktest.Preamble(), r.ops...))
			must(t, err)
			if res.First != nil {
				t.Fatalf("disagree at %s\n%s", res.First, strings.Join(res.Transcript, "\n"))
			}
		})
	}
}
