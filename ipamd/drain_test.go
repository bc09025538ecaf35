package ipamd

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/releasequeue"
)

// queued is the record a DEL of addReq(id)'s sandbox leaves when it tore
// the pod down but could not reach ipamd.
func queued(id string, ip string) releasequeue.Record {
	return releasequeue.Record{Version: releasequeue.Version, NetworkName: "aws-cni", ContainerID: id, IfName: "eth0",
		PodNamespace: "default", PodName: "pod-" + id, IPs: []netip.Addr{netip.MustParseAddr(ip)}, TornDownAt: time.Now()}
}

// evictedWithQueue: ipamd assigns an address to each sandbox, is killed
// with its checkpoint kept, and the DELs of those listed in gone queue
// their releases. It returns the addresses by sandbox.
func evictedWithQueue(t *testing.T, sock, ckpt string, ids []string, gone ...string) map[string]string {
	t.Helper()
	d := start(t, sock, Config{Checkpoint: ckpt, ReleaseQueue: releasequeue.DirFor(sock)})
	ips := map[string]string{}
	for _, id := range ids {
		rep, err := client(t, sock).AddNetwork(ctx(t), addReq(id))
		if err != nil || !rep.Success {
			t.Fatal(rep, err)
		}
		ips[id] = rep.IPAllocationMetadata[0].IPv4Addr
	}
	d.Kill()
	q := releasequeue.Queue{Dir: releasequeue.DirFor(sock)}
	for _, id := range gone {
		if err := q.Append(queued(id, ips[id])); err != nil {
			t.Fatal(err)
		}
	}
	return ips
}

func held(d *Daemon) []string {
	var out []string
	for _, a := range d.Allocations() {
		out = append(out, a.Key.ContainerID)
	}
	return out
}

func TestDrainReleasesQueuedAddressesBeforeServing(t *testing.T) {
	sock, ckpt := sockPath(t), ckptPath(t)
	evictedWithQueue(t, sock, ckpt, []string{"c1", "c2", "c3"}, "c1", "c2")
	d := newDaemon(t, sock, "m5.large", Config{Checkpoint: ckpt, ReleaseQueue: releasequeue.DirFor(sock)})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	// Start returned: ipamd serves from here on, so the releases came first.
	if got := held(d); !slices.Equal(got, []string{"c3"}) {
		t.Fatalf("held after start: %v, want only c3", got)
	}
	if f, err := checkpoint.Read(ckpt); err != nil || len(f.Allocations) != 1 {
		t.Fatalf("checkpoint after the drain: %+v %v", f, err)
	}
	if e, errs := (releasequeue.Queue{Dir: releasequeue.DirFor(sock)}).List(); len(e) != 0 || len(errs) != 0 {
		t.Fatalf("queue after the drain: %v %v", e, errs)
	}
}

// A record is evidence for its own sandbox only: a record of an old
// sandbox never frees the address a newer sandbox of the same pod holds,
// nor an address its sandbox does not hold.
func TestDrainReleasesForTheOwnerOnly(t *testing.T) {
	sock, ckpt := sockPath(t), ckptPath(t)
	ips := evictedWithQueue(t, sock, ckpt, []string{"c1", "c2"})
	q := releasequeue.Queue{Dir: releasequeue.DirFor(sock)}
	old := queued("c-old", ips["c1"]) // an old sandbox of c1's pod, naming its address
	old.PodName = "pod-c1"
	wrongIP := queued("c2", ips["c1"]) // c2's sandbox, c1's address
	for _, r := range []releasequeue.Record{old, wrongIP} {
		if err := q.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	d := start(t, sock, Config{Checkpoint: ckpt, ReleaseQueue: q.Dir})
	if got := held(d); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("held after start: %v, want c1 and c2", got)
	}
	if e, _ := q.List(); len(e) != 0 {
		t.Fatalf("stale records kept: %v", e)
	}
}

func TestDrainSetsBadRecordsAside(t *testing.T) {
	sock, ckpt := sockPath(t), ckptPath(t)
	evictedWithQueue(t, sock, ckpt, []string{"c1", "c2"}, "c1")
	dir := releasequeue.DirFor(sock)
	if err := os.WriteFile(filepath.Join(dir, "junk.json"), []byte(`{"version":"vpccni-release/1","containerID":"c2"`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := start(t, sock, Config{Checkpoint: ckpt, ReleaseQueue: dir})
	if got := held(d); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("held after start: %v, want c2 (the bad record frees nothing)", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "junk.json.bad")); err != nil {
		t.Fatalf("the bad record is not set aside: %v", err)
	}
}

// A crash at either of the drain's failpoints leaves nothing released
// twice: the restarted ipamd releases each queued address once, and no
// address is held by two sandboxes.
func TestDrainCrashSafe(t *testing.T) {
	for _, point := range []failpoint.Name{FailDrainBeforeCheckpoint, FailDrainBeforeRemove} {
		t.Run(string(point), func(t *testing.T) {
			sock, ckpt := sockPath(t), ckptPath(t)
			ips := evictedWithQueue(t, sock, ckpt, []string{"c1", "c2"}, "c1")
			fp := &failpoint.Set{}
			if err := fp.Arm(point, failpoint.Crash, 1); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Checkpoint: ckpt, ReleaseQueue: releasequeue.DirFor(sock)}
			d := newDaemon(t, sock, "m5.large", cfg, WithFailpoints(fp))
			err := d.Start()
			if f, ok := failpoint.As(err); !ok || f.Name != point {
				t.Fatalf("Start: %v, want the failpoint", err)
			}
			if d.Serving() {
				t.Fatal("ipamd serves after dying while it started")
			}
			// The restart: a new process, the failpoint spent.
			d2 := start(t, sock, cfg, WithFailpoints(fp))
			if got := held(d2); !slices.Equal(got, []string{"c2"}) {
				t.Fatalf("held after the restart: %v, want c2", got)
			}
			// c1's address goes to the next pod once, c2's to nobody.
			rep, err := client(t, sock).AddNetwork(ctx(t), addReq("c3"))
			if err != nil || !rep.Success {
				t.Fatal(rep, err)
			}
			if got := rep.IPAllocationMetadata[0].IPv4Addr; got == ips["c2"] {
				t.Fatalf("c3 got c2's address %s", got)
			}
			if e, _ := (releasequeue.Queue{Dir: cfg.ReleaseQueue}).List(); len(e) != 0 {
				t.Fatalf("records left: %v", e)
			}
		})
	}
}

func TestNoQueueConfiguredDrainsNothing(t *testing.T) {
	sock, ckpt := sockPath(t), ckptPath(t)
	evictedWithQueue(t, sock, ckpt, []string{"c1"}, "c1")
	d := start(t, sock, Config{Checkpoint: ckpt})
	if got := held(d); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("held: %v", got)
	}
	if e, _ := (releasequeue.Queue{Dir: releasequeue.DirFor(sock)}).List(); len(e) != 1 {
		t.Fatal("the record was touched by an ipamd without a queue")
	}
}
