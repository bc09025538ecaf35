package ipamd

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
)

// node is a model node namespace where pods' host veths and routes can be
// made as the plugin makes them.
type node struct {
	k *model.Kernel
	h kernel.API
}

func newNode(t *testing.T) *node {
	t.Helper()
	k := model.New()
	if err := k.AddNamespace("node"); err != nil {
		t.Fatal(err)
	}
	h, err := k.Open("node")
	if err != nil {
		t.Fatal(err)
	}
	return &node{k: k, h: h}
}

// pod gives the node what the plugin leaves for a running pod: its host
// veth, the /32 route to it in main and rule 512.
func (n *node) pod(t *testing.T, name string, ip netip.Addr) {
	t.Helper()
	veth := ownership.HostVeth(ownership.DefaultVethPrefix, "default", name)
	if err := n.k.AddNamespace("pod-" + name); err != nil {
		t.Fatal(err)
	}
	p, _ := n.k.Open("pod-" + name)
	if err := n.h.AddVeth(kernel.VethSpec{Name: veth, PeerName: "eth0", PeerNamespace: p}); err != nil {
		t.Fatal(err)
	}
	if err := n.h.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	l, _ := n.h.LinkByName(veth)
	host := &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := n.h.RouteAdd(kernel.Route{Dst: host, LinkIndex: l.Index, Scope: kernel.ScopeLink}); err != nil {
		t.Fatal(err)
	}
	if err := n.h.RuleAdd(kernel.Rule{Priority: 512, Dst: host, Table: kernel.TableMain}); err != nil {
		t.Fatal(err)
	}
}

// gone is the runtime removing the pod's namespace: the veth pair and its
// routes go, its rules stay.
func (n *node) gone(t *testing.T, name string) {
	t.Helper()
	if err := n.k.DeleteNamespace("pod-" + name); err != nil {
		t.Fatal(err)
	}
}

func (n *node) rules512(t *testing.T) []string {
	t.Helper()
	rs, err := n.h.RuleList(kernel.FamilyV4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Priority == 512 {
			out = append(out, r.Dst.String())
		}
	}
	return out
}

// addReqFor and delReqFor are a pod's calls, named as the node helper
// names its veth.
func addReqFor(name string) *rpc.AddNetworkRequest {
	r := addReq("sandbox-" + name)
	r.K8S_POD_NAME = name
	return r
}

func delReqFor(name string) *rpc.DelNetworkRequest {
	r := delReq("sandbox-" + name)
	r.K8S_POD_NAME = name
	return r
}

func ckptPath(t *testing.T) string { return filepath.Join(t.TempDir(), "aws-node", "ipam.json") }

// TestCheckpointSurvivesKill: what the plugin was told is on disk before
// the reply; a new ipamd after SIGKILL restores it and answers the DEL.
func TestCheckpointSurvivesKill(t *testing.T) {
	sock, path := sockPath(t), ckptPath(t)
	d := start(t, sock, Config{Checkpoint: path})
	c := client(t, sock)
	rep, err := c.AddNetwork(ctx(t), addReq("c1"))
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint %v mode %v", err, fi.Mode())
	}
	f, err := checkpoint.Read(path)
	if err != nil || len(f.Allocations) != 1 || f.Allocations[0].IPv4 != rep.IPAllocationMetadata[0].IPv4Addr ||
		f.Allocations[0].Metadata.K8SPodName != "pod-c1" {
		t.Fatalf("checkpoint after ADD: %+v %v", f, err)
	}
	d.Kill()
	d2 := start(t, sock, Config{Checkpoint: path})
	if got := d2.Allocations(); len(got) != 1 || got[0].Key.ContainerID != "c1" {
		t.Fatalf("restored %+v", got)
	}
	del, err := client(t, sock).DelNetwork(ctx(t), delReq("c1"))
	if err != nil || !del.Success {
		t.Fatalf("DEL after restart: %v %v", del, err)
	}
	if f, _ := checkpoint.Read(path); len(f.Allocations) != 0 {
		t.Fatalf("released allocation still checkpointed: %+v", f)
	}
}

// TestCheckpointWriteFailureUndoes: an address is never given out unless
// it is on disk.
func TestCheckpointWriteFailureUndoes(t *testing.T) {
	sock, path := sockPath(t), ckptPath(t)
	d := start(t, sock, Config{Checkpoint: path})
	dir := filepath.Dir(path)
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if os.Geteuid() == 0 {
		// root ignores the mode: make the rename fail instead.
		os.Chmod(dir, 0o755)
		os.Remove(path)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := client(t, sock).AddNetwork(ctx(t), addReq("c1"))
	if err != nil || rep.Success {
		t.Fatalf("ADD with an unwritable checkpoint: %v %v", rep, err)
	}
	if n := len(d.Allocations()); n != 0 {
		t.Fatalf("an unpersisted assignment stayed: %d", n)
	}
}

// TestCorruptCheckpoint: without recovery ipamd refuses to start, naming
// the file and what is wrong, and leaves it alone; with recovery it moves
// it aside and adopts the live pods' addresses from the kernel, so the
// next pod cannot get one of them. Removing the recovery makes the second
// half fail.
func TestCorruptCheckpoint(t *testing.T) {
	path := ckptPath(t)
	os.MkdirAll(filepath.Dir(path), 0o755)
	corrupt := []byte(`{"version":"vpc-cni-ipam/1","allocations":[{"networkName":"aws-`)
	if err := os.WriteFile(path, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	n := newNode(t)
	live := netip.MustParseAddr("10.0.1.11") // the first address a pod would get
	n.pod(t, "web-0", live)

	d := newDaemon(t, sockPath(t), "m5.large", Config{Checkpoint: path, Kernel: n.h, StandInLinks: true})
	err := d.Start()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--recover-from-kernel") {
		t.Fatalf("start on a corrupt checkpoint: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(corrupt) {
		t.Fatal("the refused checkpoint was changed")
	}

	sock := sockPath(t)
	d = newDaemon(t, sock, "m5.large", Config{Checkpoint: path, Kernel: n.h, StandInLinks: true, Restore: RestorePolicy{RecoverCorrupt: true}})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	aside, _ := filepath.Glob(path + ".unreadable-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt file not moved aside: %v", aside)
	}
	rep, err := client(t, sock).AddNetwork(ctx(t), addReq("c2"))
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	if got := rep.IPAllocationMetadata[0].IPv4Addr; got == live.String() {
		t.Fatalf("the live pod's %s went to a new pod", live)
	}
	// A DEL of the pod that cannot prove the recovered veth is its own
	// (containerd's second DEL of an old sandbox: no netns) frees nothing.
	if _, err := client(t, sock).DelNetwork(ctx(t), delReqFor("web-0")); status.Code(err) != codes.NotFound {
		t.Fatalf("DEL of the pod without proof: %v, want NotFound", err)
	}
	// The live sandbox's DEL names its veth (the peer of its eth0) and
	// releases its recovered allocation.
	veth, _ := n.h.LinkByName(ownership.HostVeth(ownership.DefaultVethPrefix, "default", "web-0"))
	req := delReqFor("web-0")
	req.HostVethIndex = int32(veth.Index)
	del, err := client(t, sock).DelNetwork(ctx(t), req)
	if err != nil || !del.Success || del.IPAllocationMetadata[0].IPv4Addr != live.String() {
		t.Fatalf("DEL of the recovered pod: %v %v", del, err)
	}
}

// TestMissingCheckpointAdopts: no file (a wiped /var/run) on a node with
// a running pod: the pod's address is adopted, not handed out.
func TestMissingCheckpointAdopts(t *testing.T) {
	n := newNode(t)
	live := netip.MustParseAddr("10.0.1.11")
	n.pod(t, "web-0", live)
	sock := sockPath(t)
	d := newDaemon(t, sock, "m5.large", Config{Checkpoint: ckptPath(t), Kernel: n.h, StandInLinks: true, Restore: RestorePolicy{AdoptOnMissing: true}})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if got := d.Allocations(); len(got) != 1 || got[0].IP != live || !got[0].Key.Recovered() {
		t.Fatalf("adopted %+v", got)
	}
}

// TestReconcilerReleasesGonePods: a checkpointed pod whose veth is gone
// (its DEL never reached ipamd) is released once past the grace period,
// and its orphan rule goes with it; a live pod keeps both.
func TestReconcilerReleasesGonePods(t *testing.T) {
	n := newNode(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sock, path := sockPath(t), ckptPath(t)
	cfg := Config{Checkpoint: path, Kernel: n.h, StandInLinks: true, Reconcile: true, Now: clock,
		Cooldown: 30 * time.Second, ReconcileGrace: time.Minute, ReconcileInterval: time.Minute}
	d := start(t, sock, cfg, WithManualLoops())
	c := client(t, sock)
	for _, name := range []string{"web-0", "web-1"} {
		rep, err := c.AddNetwork(ctx(t), addReqFor(name))
		if err != nil || !rep.Success {
			t.Fatal(rep, err)
		}
		n.pod(t, name, netip.MustParseAddr(rep.IPAllocationMetadata[0].IPv4Addr))
	}
	n.gone(t, "web-0")
	d.Tick(ctx(t))
	if len(d.Allocations()) != 2 {
		t.Fatal("released within the grace period")
	}
	now = now.Add(2 * time.Minute)
	d.Tick(ctx(t))
	got := d.Allocations()
	if len(got) != 1 || got[0].Meta.PodName != "web-1" {
		t.Fatalf("after reconcile: %+v", got)
	}
	if rs := n.rules512(t); len(rs) != 1 || rs[0] != "10.0.1.12/32" {
		t.Fatalf("rules 512 after reconcile: %v", rs)
	}
	if f, _ := checkpoint.Read(path); len(f.Allocations) != 1 {
		t.Fatalf("checkpoint after reconcile: %+v", f)
	}
	if !d.Datastore().IsCooling(netip.MustParseAddr("10.0.1.11")) {
		t.Fatal("a reconciled address skipped its cooldown")
	}
}

// TestStopWritesCheckpoint: SIGTERM's last act is a checkpoint write.
func TestStopWritesCheckpoint(t *testing.T) {
	sock, path := sockPath(t), ckptPath(t)
	d := newDaemon(t, sock, "m5.large", Config{Checkpoint: path})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := client(t, sock).AddNetwork(ctx(t), addReq("c1")); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	d.Stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no checkpoint after Stop: %v", err)
	}
	var f checkpoint.File
	if err := json.Unmarshal(b, &f); err != nil || len(f.Allocations) != 1 {
		t.Fatalf("checkpoint after Stop: %s %v", b, err)
	}
	if _, err := client(t, sock).DelNetwork(ctx(t), delReq("c1")); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stopped ipamd answered: %v", err)
	}
}

// TestReferenceCheckpointRestores: a file the reference wrote (its exact
// shape: an allocation without metadata, timestamps in nanoseconds) is
// taken back unchanged, and what vpccni writes back reads the same.
func TestReferenceCheckpointRestores(t *testing.T) {
	path := ckptPath(t)
	os.MkdirAll(filepath.Dir(path), 0o755)
	ref := `{"version":"vpc-cni-ipam/1","allocations":[` +
		`{"networkName":"aws-cni","containerID":"5f3a9c2e","ifName":"eth0","ipv4":"10.0.2.15","allocationTimestamp":1719912345123456789,"metadata":{"k8sPodNamespace":"default","k8sPodName":"nginx-0","interfacesCount":1}},` +
		`{"networkName":"aws-cni","containerID":"0e9d8c7b","ifName":"eth0","ipv4":"10.0.1.16","allocationTimestamp":1719912400500000000,"metadata":{}}]}`
	if err := os.WriteFile(path, []byte(ref), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := sockPath(t)
	d := start(t, sock, Config{Checkpoint: path})
	got := d.Allocations()
	if len(got) != 2 || got[0].IP.String() != "10.0.1.16" || got[1].Meta.PodName != "nginx-0" || got[1].DeviceNumber != 1 ||
		got[1].RouteTable != 2 || got[1].Since.UnixNano() != 1719912345123456789 {
		t.Fatalf("restored %+v", got)
	}
	f, err := checkpoint.Read(path)
	if err != nil || len(f.Allocations) != 2 {
		t.Fatalf("rewritten checkpoint: %+v %v", f, err)
	}
	del, err := client(t, sock).DelNetwork(ctx(t), &rpc.DelNetworkRequest{NetworkName: "aws-cni", ContainerID: "5f3a9c2e", IfName: "eth0"})
	if err != nil || !del.Success || del.IPAllocationMetadata[0].IPv4Addr != "10.0.2.15" {
		t.Fatalf("DEL of a pod the reference added: %v %v", del, err)
	}
}

// TestMetricsCountRequests: every answered call is counted by outcome.
func TestMetricsCountRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() metrics.PoolStats { return metrics.PoolStats{} })
	if err != nil {
		t.Fatal(err)
	}
	sock := sockPath(t)
	start(t, sock, Config{Metrics: m})
	c := client(t, sock)
	c.AddNetwork(ctx(t), addReq("c1"))
	c.AddNetwork(ctx(t), &rpc.AddNetworkRequest{ContainerID: "x"})
	c.DelNetwork(ctx(t), delReq("c1"))
	c.DelNetwork(ctx(t), delReq("c1"))
	text := gather(t, reg)
	for _, want := range []string{`vpccni_add_ip_requests_total{result="assigned"} 1`, `vpccni_add_ip_requests_total{result="invalid-request"} 1`,
		`vpccni_del_ip_requests_total{reason="PodDeleted",result="released"} 1`, `vpccni_del_ip_requests_total{reason="PodDeleted",result="unknown-pod"} 1`,
		`awscni_add_ip_req_count 2`, `awscni_del_ip_req_count{reason="PodDeleted"} 2`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s:\n%s", want, text)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestReconcilerReleasesAnEarlierSandboxsAddress: a pod whose first ADD
// failed after ipamd assigned its address (ipamd crashed before replying)
// runs again in a new sandbox with another address. Its veth exists, but
// the main table routes only the new address to it: the first sandbox's
// allocation is released; the new one is kept.
func TestReconcilerReleasesAnEarlierSandboxsAddress(t *testing.T) {
	n := newNode(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sock := sockPath(t)
	d := start(t, sock, Config{Checkpoint: ckptPath(t), Kernel: n.h, StandInLinks: true, Reconcile: true,
		Now: func() time.Time { return now }, ReconcileGrace: time.Minute, ReconcileInterval: time.Minute}, WithManualLoops())
	c := client(t, sock)
	first := addReqFor("web-0")
	first.ContainerID = "sandbox-1"
	if rep, err := c.AddNetwork(ctx(t), first); err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	second := addReqFor("web-0")
	second.ContainerID = "sandbox-2"
	rep, err := c.AddNetwork(ctx(t), second)
	if err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	n.pod(t, "web-0", netip.MustParseAddr(rep.IPAllocationMetadata[0].IPv4Addr))
	now = now.Add(2 * time.Minute)
	d.Tick(ctx(t))
	got := d.Allocations()
	if len(got) != 1 || got[0].Key.ContainerID != "sandbox-2" {
		t.Fatalf("after reconcile: %+v", got)
	}
}

// TestENIMTU: the daemon gives every ENI's link Config.ENIMTU at start,
// the primary's too (AWS_VPC_ENI_MTU).
func TestENIMTU(t *testing.T) {
	n := newNode(t)
	d := newDaemon(t, sockPath(t), "m5.large", Config{Checkpoint: ckptPath(t), Kernel: n.h, StandInLinks: true, ENIMTU: 1500})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	for _, name := range []string{"eth0", "eth1", "eth2"} {
		l, err := n.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.MTU != 1500 {
			t.Errorf("%s MTU %d, want 1500", name, l.MTU)
		}
	}
}

// TestReconcilerSkipsOnlySettledPasses: a pass over a kernel and pool
// that have not changed since the last pass is skipped only if that pass
// left nothing for later. An allocation whose pod is gone but which is
// still within the grace period, and an orphan rule whose address is
// still cooling down, are each removed by a later pass over the very
// same kernel and pool, once the clock alone has made them removable.
func TestReconcilerSkipsOnlySettledPasses(t *testing.T) {
	n := newNode(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sock := sockPath(t)
	cfg := Config{Kernel: n.h, StandInLinks: true, Reconcile: true, Now: clock,
		Cooldown: 30 * time.Second, ReconcileGrace: 2 * time.Minute, ReconcileInterval: 10 * time.Second}
	d := start(t, sock, cfg, WithManualLoops())
	c := client(t, sock)
	ips := map[string]netip.Addr{}
	for _, name := range []string{"young", "cooling"} {
		rep, err := c.AddNetwork(ctx(t), addReqFor(name))
		if err != nil || !rep.Success {
			t.Fatal(rep, err)
		}
		ips[name] = netip.MustParseAddr(rep.IPAllocationMetadata[0].IPv4Addr)
		n.pod(t, name, ips[name])
	}
	// "cooling": its DEL reached ipamd (the address cools down) but the
	// plugin never removed its rule.
	if rep, err := c.DelNetwork(ctx(t), delReqFor("cooling")); err != nil || !rep.Success {
		t.Fatal(rep, err)
	}
	n.gone(t, "cooling")
	has := func(name string) bool { return slices.Contains(n.rules512(t), ips[name].String()+"/32") }
	held := func(name string) bool {
		return slices.ContainsFunc(d.Allocations(), func(a datastore.Allocation) bool { return a.IP == ips[name] })
	}
	pass := func(after time.Duration) {
		t.Helper()
		now = now.Add(after)
		if _, err := d.Tick(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	pass(10 * time.Second) // the address rests for 20s more
	if !has("cooling") {
		t.Fatalf("a pass removed the rule of an address still cooling down: rules %v", n.rules512(t))
	}
	pass(30 * time.Second) // the same kernel and pool; the cooldown is over
	if has("cooling") {
		t.Fatalf("the orphan rule of a rested address outlived a pass: rules %v", n.rules512(t))
	}
	n.gone(t, "young")     // its DEL never comes
	pass(10 * time.Second) // young is 50s old
	if !held("young") || !has("young") {
		t.Fatalf("a pass released a gone pod within the grace period: rules %v, allocations %+v", n.rules512(t), d.Allocations())
	}
	pass(80 * time.Second) // the same kernel and pool; past young's grace
	if held("young") || has("young") {
		t.Fatalf("a gone pod's allocation outlived the grace period: rules %v, allocations %+v", n.rules512(t), d.Allocations())
	}
}
