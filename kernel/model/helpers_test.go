package model

import (
	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"net"
	"syscall"
	"testing"

	"github.com/vpccni/vpccni/kernel"
)

// Shared helpers (internal/testsupport/ktest).
var (
	cidr    = ktest.Prefix
	must    = ktest.Must
	errnoOf = ktest.Errno
)

func ip(s string) net.IP { return net.ParseIP(s) }

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if got := errnoOf(err); got != want {
		t.Fatalf("error %v (errno %d), want %v (%d)", err, got, want, want)
	}
}

// world is a node with eth0 (up, 10.0.1.10/24, default via 10.0.1.1) and
// a pod whose eth0 has its peer "enia" in the node.
type world struct {
	k         *Kernel
	node, pod kernel.API
	eth0      int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	k := New()
	must(t, k.AddNamespace("node"))
	must(t, k.AddNamespace("pod"))
	node, err := k.Open("node")
	must(t, err)
	pod, err := k.Open("pod")
	must(t, err)
	eth0, err := k.AddDevice("node", "eth0", 9001, nil)
	must(t, err)
	must(t, node.LinkSetUp("eth0"))
	must(t, node.AddrAdd(eth0, cidr("10.0.1.10/24")))
	must(t, node.RouteAdd(kernel.Route{Gw: ip("10.0.1.1"), LinkIndex: eth0}))
	must(t, pod.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "enia", PeerNamespace: node, MTU: 9001}))
	must(t, node.LinkSetUp("enia"))
	must(t, pod.LinkSetUp("eth0"))
	return &world{k: k, node: node, pod: pod, eth0: eth0}
}

func (w *world) index(t *testing.T, api kernel.API, name string) int {
	t.Helper()
	l, err := api.LinkByName(name)
	must(t, err)
	return l.Index
}

func snapshot(t *testing.T, api kernel.API) []string {
	t.Helper()
	s, err := kernel.Snapshot(api)
	must(t, err)
	return s.Lines()
}

func routesTo(t *testing.T, api kernel.API, dst string) []kernel.Route {
	t.Helper()
	rs, err := api.RouteList(kernel.FamilyAll, 0)
	must(t, err)
	var out []kernel.Route
	for _, r := range rs {
		if (r.Dst == nil && dst == "default") || (r.Dst != nil && r.Dst.String() == dst) {
			out = append(out, r)
		}
	}
	return out
}

func rulesAt(t *testing.T, api kernel.API, prio int) []kernel.Rule {
	t.Helper()
	rs, err := api.RuleList(kernel.FamilyAll)
	must(t, err)
	var out []kernel.Rule
	for _, r := range rs {
		if r.Priority == prio {
			out = append(out, r)
		}
	}
	return out
}
