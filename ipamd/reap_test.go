package ipamd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// handed is a pod whose DEL left its veth pair (rules and route removed):
// its name, address and host veth ifindex.
type handed struct {
	name string
	ip   netip.Addr
	idx  int
}

// handOverSetup: a daemon on a model node (its own loops off: the test
// runs the reaper), a pod added and torn down but for its veth, and the
// DelNetwork that hands the veth over.
func handOverSetup(t *testing.T, cfg Config, opts ...Option) (*Daemon, *node, handed) {
	t.Helper()
	n := newNode(t)
	sock := sockPath(t)
	cfg.Kernel, cfg.StandInLinks = n.h, true
	d := newDaemon(t, sock, "m5.large", cfg, append([]Option{WithManualLoops()}, opts...)...)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	rep, err := client(t, sock).AddNetwork(ctx(t), addReqFor("web-0"))
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	ip := netip.MustParseAddr(rep.IPAllocationMetadata[0].IPv4Addr)
	n.pod(t, "web-0", ip)
	veth := ownership.HostVeth(ownership.DefaultVethPrefix, "default", "web-0")
	l, err := n.h.LinkByName(veth)
	if err != nil {
		t.Fatal(err)
	}
	// The DEL's teardown: rules and route, not the veth.
	rs, _ := n.h.RuleList(kernel.FamilyV4)
	for _, r := range rs {
		if r.Priority == ownership.PrioToPod {
			n.h.RuleDel(r)
		}
	}
	routes, _ := n.h.RouteList(kernel.FamilyV4, kernel.TableMain)
	for _, r := range routes {
		if r.LinkIndex == l.Index {
			n.h.RouteDel(r)
		}
	}
	req := delReqFor("web-0")
	req.HostVethIndex, req.DeleteHostVeth = int32(l.Index), true
	del, err := client(t, sock).DelNetwork(ctx(t), req)
	if err != nil || !del.Success {
		t.Fatal(del, err)
	}
	if !del.HostVethTaken {
		t.Fatal("ipamd with the node's kernel did not take the veth")
	}
	return d, n, handed{name: "web-0", ip: ip, idx: l.Index}
}

func (d *Daemon) holds(ip netip.Addr) (datastore.Allocation, bool) {
	for _, a := range d.Allocations() {
		if a.IP == ip {
			return a, true
		}
	}
	return datastore.Allocation{}, false
}

func vethExists(t *testing.T, n *node, idx int) bool {
	t.Helper()
	_, err := n.h.LinkByIndex(idx)
	if err != nil && !kernel.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A handed-over address is held, and says so in the checkpoint, until the
// reaper has deleted the pod's veth; then it is released (once).
func TestHandOverHoldsUntilTheVethIsDeleted(t *testing.T) {
	ckpt := ckptPath(t)
	d, n, p := handOverSetup(t, Config{Checkpoint: ckpt, Cooldown: time.Minute})
	a, held := d.holds(p.ip)
	if !held || !a.Releasing || a.Meta.HostVethIndex != p.idx {
		t.Fatalf("after the hand-over: held %v, %+v; want releasing with ifindex %d", held, a, p.idx)
	}
	f, err := checkpoint.Read(ckpt)
	if err != nil || len(f.Allocations) != 1 || !f.Allocations[0].Releasing || f.Allocations[0].HostVethIndex != p.idx {
		t.Fatalf("checkpoint after the hand-over: %+v %v", f, err)
	}
	if !vethExists(t, n, p.idx) {
		t.Fatal("the veth went before the reaper ran")
	}
	if _, err := d.Tick(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if vethExists(t, n, p.idx) {
		t.Fatal("the reaper left the handed-over veth")
	}
	if _, held := d.holds(p.ip); held {
		t.Fatal("the address is still held after its veth was deleted")
	}
	if !d.store.IsCooling(p.ip) {
		t.Fatal("the released address is not cooling down")
	}
	if f, err := checkpoint.Read(ckpt); err != nil || len(f.Allocations) != 0 {
		t.Fatalf("checkpoint after the reaper: %+v %v", f, err)
	}
}

// A plain release of a handed-over allocation (the runtime's second DEL,
// with no namespace) does not hurry it: the address stays held until the
// veth is gone.
func TestPlainReleaseWaitsForTheReaper(t *testing.T) {
	d, n, p := handOverSetup(t, Config{})
	rep, err := client(t, d.cfg.SocketPath).DelNetwork(ctx(t), delReqFor(p.name))
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	if _, held := d.holds(p.ip); !held || !vethExists(t, n, p.idx) {
		t.Fatal("a second DEL released a handed-over address whose veth is still there")
	}
}

// The runtime may remove the pod's namespace first: the veth is gone, the
// address is only released.
func TestReaperReleasesWhenTheNamespaceWentFirst(t *testing.T) {
	d, n, p := handOverSetup(t, Config{})
	n.gone(t, p.name)
	if _, err := d.Tick(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, held := d.holds(p.ip); held {
		t.Fatal("the address of a pod whose veth went with its namespace is still held")
	}
}

// The ifindex is the sandbox's proof; a link of another name there now is
// not the pod's veth and is never deleted.
func TestReaperLeavesAnotherLinkAtTheIndex(t *testing.T) {
	d, n, p := handOverSetup(t, Config{})
	n.gone(t, p.name)
	// Another link now has the index the hand-over names (Linux gives an
	// index again only after it has run out of others; the test moves the
	// claim instead).
	if err := n.h.AddVeth(kernel.VethSpec{Name: "other0", PeerName: "other1"}); err != nil {
		t.Fatal(err)
	}
	other, err := n.h.LinkByName("other0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.holds(p.ip)
	if _, err := d.store.HandOver(a.Key, datastore.Meta{PodNamespace: "default", PodName: p.name, HostVethIndex: other.Index}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Tick(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.h.LinkByName("other0"); err != nil {
		t.Fatalf("the reaper deleted other0, at the handed-over veth's ifindex: %v", err)
	}
	if _, held := d.holds(p.ip); held {
		t.Fatal("the address is still held: its pod's veth is gone")
	}
}

// A restart finds the hand-over in the checkpoint and finishes it before
// serving; a crash in the reaper, either side of the delete, loses
// nothing.
func TestReaperCrashSafe(t *testing.T) {
	for _, point := range []failpoint.Name{FailReapBeforeDelete, FailReapBeforeRelease} {
		t.Run(string(point), func(t *testing.T) {
			ckpt := ckptPath(t)
			fps := &failpoint.Set{}
			d, n, p := handOverSetup(t, Config{Checkpoint: ckpt}, WithFailpoints(fps))
			if err := fps.Arm(point, failpoint.Crash, 1); err != nil {
				t.Fatal(err)
			}
			d.Tick(ctx(t)) // crashes
			if d.Serving() {
				t.Fatalf("ipamd serves after a crash at %s", point)
			}
			if _, held := d.holds(p.ip); !held {
				t.Fatal("the crash lost the allocation")
			}
			d2 := newDaemon(t, d.cfg.SocketPath, "m5.large", Config{Checkpoint: ckpt, Kernel: n.h, StandInLinks: true}, WithManualLoops())
			if err := d2.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d2.Stop)
			if vethExists(t, n, p.idx) {
				t.Fatal("the restarted ipamd left the handed-over veth")
			}
			if _, held := d2.holds(p.ip); held {
				t.Fatal("the restarted ipamd still holds the handed-over address")
			}
		})
	}
}

// Without the node's kernel ipamd cannot delete a veth: it takes none, and
// the DEL deletes its own.
func TestNoKernelTakesNoVeth(t *testing.T) {
	sock := sockPath(t)
	start(t, sock, Config{})
	if _, err := client(t, sock).AddNetwork(ctx(t), addReqFor("web-0")); err != nil {
		t.Fatal(err)
	}
	req := delReqFor("web-0")
	req.HostVethIndex, req.DeleteHostVeth = 7, true
	rep, err := client(t, sock).DelNetwork(ctx(t), req)
	if err != nil || !rep.Success || rep.HostVethTaken {
		t.Fatalf("DelNetwork = %+v, %v; want a plain release", rep, err)
	}
}
