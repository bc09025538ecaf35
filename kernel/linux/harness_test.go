package linux

import (
	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"net"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// Shared helpers (internal/testsupport/ktest).
var (
	cidr    = ktest.Prefix
	must    = ktest.Must
	errnoOf = ktest.Errno
)

// Every real-kernel test here needs root: it calls testns.Require (a
// failure with the reason without it), makes its own namespaces and
// deletes them when it ends, pass or fail. Nothing touches the machine's
// own namespace.

func ip(s string) net.IP { return net.ParseIP(s) }

// world is three namespaces: a node, a pod and a "vpc" standing in for
// what is behind the ENIs (eth0 and eth1 are veths whose other ends are
// there, so they have carrier).
type world struct {
	name           string
	node, pod, vpc kernel.API
}

func realWorld(t *testing.T) *world {
	t.Helper()
	testns.Require(t)
	w := &world{name: "linux"}
	for _, p := range []*kernel.API{&w.node, &w.pod, &w.vpc} {
		ns := testns.Temp(t, "vpccni-k")
		h, err := Opener{}.Open(ns.Path())
		must(t, err)
		t.Cleanup(func() { h.Close() })
		*p = h
	}
	return w
}

func modelWorld(t *testing.T) *world {
	t.Helper()
	k := model.New()
	w := &world{name: "model"}
	for i, p := range []*kernel.API{&w.node, &w.pod, &w.vpc} {
		path := []string{"node", "pod", "vpc"}[i]
		must(t, k.AddNamespace(path))
		h, err := k.Open(path)
		must(t, err)
		*p = h
	}
	return w
}

// both returns the real world and the model world, set up alike: IPv6
// without DAD on new links (so addresses are usable at once on Linux,
// as they are in the model), lo up, eth0 and eth1 up with carrier.
func both(t *testing.T) []*world {
	t.Helper()
	ws := []*world{realWorld(t), modelWorld(t)}
	for _, w := range ws {
		for _, h := range []kernel.API{w.node, w.pod, w.vpc} {
			must(t, h.SysctlSet("net/ipv6/conf/all/disable_ipv6", "0"))
			must(t, h.SysctlSet("net/ipv6/conf/default/accept_dad", "0"))
			must(t, h.LinkSetUp("lo"))
		}
		for _, e := range []string{"eth0", "eth1"} {
			must(t, w.vpc.AddVeth(kernel.VethSpec{Name: "v" + e, PeerName: e, PeerNamespace: w.node, MTU: 9001}))
			must(t, w.vpc.LinkSetUp("v"+e))
			must(t, w.node.LinkSetUp(e))
		}
	}
	return ws
}

// idx is the index of a link, or 0 (which every call refuses) when there
// is none.
func (w *world) idx(t *testing.T, api kernel.API, name string) int {
	l, err := api.LinkByName(name)
	if err != nil && t != nil {
		t.Logf("%s: %v", w.name, err)
	}
	return l.Index
}

func lines(t *testing.T, api kernel.API) []string {
	t.Helper()
	s, err := kernel.Snapshot(api)
	must(t, err)
	return s.Lines()
}

// settle waits, on Linux, until every IPv6 address of the node and the
// pod is usable: not tentative, with its local-table route, which the
// kernel installs from a work queue a moment after the address is added
// even without DAD. The model has both at once.
func settle(t *testing.T, w *world) {
	t.Helper()
	if w.name != "linux" {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, h := range []kernel.API{w.node, w.pod} {
		for !ipv6Settled(t, h) {
			if time.Now().After(deadline) {
				t.Fatal("IPv6 addresses did not settle")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func ipv6Settled(t *testing.T, h kernel.API) bool {
	as, err := h.AddrList(0, kernel.FamilyV6)
	must(t, err)
	local, err := h.RouteList(kernel.FamilyV6, kernel.TableLocal)
	must(t, err)
	for _, a := range as {
		if a.Flags&kernel.AddrFlagTentative != 0 {
			return false
		}
		found := false
		for _, r := range local {
			found = found || (r.Dst != nil && r.Dst.IP.Equal(a.IPNet.IP))
		}
		if !found {
			return false
		}
	}
	return true
}
