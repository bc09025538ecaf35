package model

import (
	"fmt"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// BenchmarkPodLifecycle: one pod set up as the driver does and torn down
// by deleting its namespace, on a node with 50 pods' worth of state.
func BenchmarkPodLifecycle(b *testing.B) {
	k := New()
	if err := k.AddNamespace("node"); err != nil {
		b.Fatal(err)
	}
	node, _ := k.Open("node")
	eth0, _ := k.AddDevice("node", "eth0", 9001, nil)
	node.LinkSetUp("eth0")
	node.AddrAdd(eth0, cidr("10.0.0.10/16"))
	node.RouteAdd(kernel.Route{Gw: ip("10.0.0.1"), LinkIndex: eth0})
	node.SysctlSet("net/ipv4/ip_forward", "1")
	pod := func(i int) {
		ns := fmt.Sprintf("pod%d", i)
		k.AddNamespace(ns)
		p, _ := k.Open(ns)
		hv := fmt.Sprintf("eni%d", i)
		p.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: hv, PeerNamespace: node, MTU: 9001})
		node.LinkSetUp(hv)
		p.LinkSetUp("eth0")
		l, _ := node.LinkByName(hv)
		a := cidr(fmt.Sprintf("10.0.%d.%d/32", 1+i/250, 1+i%250))
		node.RouteAdd(kernel.Route{Dst: a, LinkIndex: l.Index, Scope: kernel.ScopeLink})
		node.RuleAdd(kernel.Rule{Priority: 512, Dst: a, Table: kernel.TableMain})
		node.RuleAdd(kernel.Rule{Priority: 1536, Src: a, Table: 2})
		e0, _ := p.LinkByName("eth0")
		p.AddrAdd(e0.Index, a)
		node.RouteGet(kernel.RouteQuery{Dst: ip("10.0.0.99"), Src: a.IP, IifName: hv})
	}
	for i := 0; i < 50; i++ {
		pod(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pod(1000 + i%1000)
		k.DeleteNamespace(fmt.Sprintf("pod%d", 1000+i%1000))
		a := cidr(fmt.Sprintf("10.0.%d.%d/32", 1+(1000+i%1000)/250, 1+(1000+i%1000)%250))
		node.RuleDel(kernel.Rule{Priority: 512, Dst: a})
		node.RuleDel(kernel.Rule{Priority: 1536, Src: a})
	}
}
