package linux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

func TestOpen(t *testing.T) {
	testns.Require(t)
	for _, p := range []string{"/var/run/netns/vpccni-does-not-exist", "/nonexistent/dir/ns"} {
		if _, err := (Opener{}).Open(p); !errors.Is(err, kernel.ErrNamespaceGone) {
			t.Errorf("open %s: %v", p, err)
		}
	}
	// A file that is not a network namespace: a regular file (what an
	// unmounted bind mount leaves), another kind of namespace.
	f := filepath.Join(t.TempDir(), "ns")
	must(t, os.WriteFile(f, nil, 0o644))
	for _, p := range []string{f, "/proc/self/ns/mnt"} {
		if _, err := (Opener{}).Open(p); !errors.Is(err, kernel.ErrNamespaceGone) {
			t.Errorf("open %s: %v", p, err)
		}
	}
	// "" is the calling thread's namespace: opened from inside a test
	// namespace, the handle works there.
	ns := testns.Temp(t, "vpccni-kopen")
	var h kernel.API
	must(t, ns.Do(func() error {
		var err error
		h, err = Opener{}.Open("")
		return err
	}))
	must(t, h.AddBridge("br0", 0))
	other, err := Opener{}.Open(ns.Path())
	must(t, err)
	if _, err := other.LinkByName("br0"); err != nil {
		t.Fatalf("Open(\"\") inside the namespace is not that namespace: %v", err)
	}
	// A handle of another implementation cannot be a veth peer.
	k := model.New()
	must(t, k.AddNamespace("x"))
	mh, _ := k.Open("x")
	if err := h.AddVeth(kernel.VethSpec{Name: "a", PeerName: "b", PeerNamespace: mh}); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("model handle as peer: %v", err)
	}
	must(t, other.Close())
	must(t, h.Close())
	must(t, h.Close()) // idempotent
	if _, err := h.LinkList(); errnoOf(err) != syscall.EBADF {
		t.Fatalf("closed handle: %v", err)
	}
}

// TestVethPeerInOtherNamespace: the peer is created there directly, and
// each end's ParentIndex is the other's index.
func TestVethPeerInOtherNamespace(t *testing.T) {
	w := realWorld(t)
	must(t, w.pod.AddVeth(kernel.VethSpec{Name: "eth0", MTU: 9001, PeerName: "hv0", PeerNamespace: w.node, PeerHardwareAddr: mac}))
	hv, err := w.node.LinkByName("hv0")
	must(t, err)
	e0, err := w.pod.LinkByName("eth0")
	must(t, err)
	if hv.ParentIndex != e0.Index || e0.ParentIndex != hv.Index || hv.Kind != kernel.KindVeth || hv.MTU != 9001 ||
		e0.MTU != 9001 || hv.HardwareAddr.String() != mac.String() || hv.Up {
		t.Fatalf("veth ends %+v %+v", hv, e0)
	}
	if _, err := w.pod.LinkByName("hv0"); !kernel.IsNotFound(err) {
		t.Fatalf("peer also in the pod namespace: %v", err)
	}
	lo, err := w.node.LinkByIndex(1)
	must(t, err)
	if lo.Kind != kernel.KindLoopback || lo.Name != "lo" {
		t.Fatalf("lo: %+v", lo)
	}
}

// TestRealRulesSurviveDevice: on Linux, deleting a veth takes its routes,
// in every table, and keeps the rules, in both families — the asymmetry
// every leak comes from.
func TestRealRulesSurviveDevice(t *testing.T) {
	w := realWorld(t)
	must(t, w.pod.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "hv0", PeerNamespace: w.node}))
	must(t, w.node.LinkSetUp("hv0"))
	hv := w.idx(t, w.node, "hv0")
	for _, r := range []kernel.Route{
		{Dst: cidr("10.0.1.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink},
		{Table: 2, Dst: cidr("10.0.1.11/32"), LinkIndex: hv, Scope: kernel.ScopeLink},
		{Dst: cidr("2001:db8::11/128"), LinkIndex: hv},
	} {
		must(t, w.node.RouteAdd(r))
	}
	for _, r := range []kernel.Rule{
		{Priority: 512, Dst: cidr("10.0.1.11/32"), Table: kernel.TableMain},
		{Priority: 1536, Src: cidr("10.0.1.11/32"), Table: 2},
		{Priority: 512, Dst: cidr("2001:db8::11/128"), Table: kernel.TableMain},
		{Priority: 10, Family: kernel.FamilyV4, IifName: "hv0", Table: 2},
	} {
		must(t, w.node.RuleAdd(r))
	}
	must(t, w.pod.LinkDel("eth0"))
	if _, err := w.node.LinkByName("hv0"); !kernel.IsNotFound(err) {
		t.Fatalf("peer survived: %v", err)
	}
	rs, err := w.node.RouteList(kernel.FamilyAll, 0)
	must(t, err)
	for _, r := range rs {
		if r.LinkIndex == hv {
			t.Fatalf("route survived its device: %+v", r)
		}
	}
	rules, err := w.node.RuleList(kernel.FamilyAll)
	must(t, err)
	var kept []string
	for _, r := range rules {
		if r.Priority == 512 || r.Priority == 1536 || r.Priority == 10 {
			kept = append(kept, kernel.RuleString(r))
		}
	}
	if len(kept) != 4 {
		t.Fatalf("rules must survive their device (Linux keeps them); kept %q", kept)
	}
}

// TestNamespaceDeletionTakesPeer: once a namespace is gone (unmounted and
// no handle left), the kernel deletes its veths, and their peers; it does
// so asynchronously, so the test waits a little.
func TestNamespaceDeletionTakesPeer(t *testing.T) {
	testns.Require(t)
	node := testns.Temp(t, "vpccni-knode")
	pod, err := testns.New("vpccni-kpod")
	must(t, err)
	t.Cleanup(func() { pod.Close() })
	nh, err := Opener{}.Open(node.Path())
	must(t, err)
	defer nh.Close()
	ph, err := Opener{}.Open(pod.Path())
	must(t, err)
	must(t, ph.AddVeth(kernel.VethSpec{Name: "eth0", PeerName: "hv0", PeerNamespace: nh}))
	must(t, ph.Close())
	must(t, pod.Close())
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := nh.LinkByName("hv0"); kernel.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer of a deleted namespace's veth is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSysctlsStayInTheNamespace: a write through a handle changes the
// namespace's value, not the machine's.
func TestSysctlsStayInTheNamespace(t *testing.T) {
	w := realWorld(t)
	host, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	must(t, err)
	want := "1"
	if strings.TrimSpace(string(host)) == "1" {
		want = "0"
	}
	must(t, w.node.SysctlSet("net/ipv4/ip_forward", want))
	if v, err := w.node.SysctlGet("net/ipv4/ip_forward"); err != nil || v != want {
		t.Fatalf("read back %q %v", v, err)
	}
	if v, _ := w.node.SysctlGet("net/ipv4/conf/all/forwarding"); v != want {
		t.Fatalf("all/forwarding %q", v)
	}
	after, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if string(after) != string(host) {
		t.Fatal("the machine's ip_forward changed")
	}
	if _, err := w.node.SysctlGet("net/ipv4/conf/nope/forwarding"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("missing key: %v", err)
	}
	if err := w.node.SysctlSet("../../etc/passwd", "x"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("escaping key: %v", err)
	}
}
