package playback

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// poolIpamd is a stand-in ipamd for recording journals on the model: five
// addresses on device 0 (table main), then device 1 (table 2); it can be
// down (Unavailable) and forget everything (a restart without its
// checkpoint), as in #2048.
type poolIpamd struct {
	down  bool
	held  map[string]*rpc.IPAllocationMetadata // by container ID
	given int
}

func (f *poolIpamd) AddNetwork(_ context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	if f.down {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	dev := f.given / 5
	ip := fmt.Sprintf("10.0.%d.%d", dev+1, 11+f.given%5)
	f.given++
	md := &rpc.IPAllocationMetadata{IPv4Addr: ip, DeviceNumber: int32(dev), RouteTableId: int32(dev + 1)}
	f.held[in.ContainerID] = md
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, nil
}

func (f *poolIpamd) DelNetwork(_ context.Context, in *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	if f.down {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	md, ok := f.held[in.ContainerID]
	if !ok {
		return nil, status.Error(codes.NotFound, "datastore: unknown pod")
	}
	delete(f.held, in.ContainerID)
	return &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, nil
}

type nop struct{}

func (nop) Close() error { return nil }

// recorder is a node on the model whose plugin journals every invocation.
type recording struct {
	// stateDir is the recording node's: the replay must not write there.
	stateDir string
	t        testing.TB
	k        *model.Kernel
	ipamd    *poolIpamd
	p        *plugin.Plugin
	path     string
	base     kernel.State
	results  map[string][]byte
	// extra netconf fields
	extra map[string]any
}

func newRecording(t testing.TB) *recording {
	r := &recording{t: t, k: model.New(), ipamd: &poolIpamd{held: map[string]*rpc.IPAllocationMetadata{}},
		path: filepath.Join(t.TempDir(), "journal.jsonl"), results: map[string][]byte{}, stateDir: filepath.Join(t.TempDir(), "state")}
	if err := r.k.AddNamespace(NodeNS); err != nil {
		t.Fatal(err)
	}
	r.plugENIs()
	r.setBackend(r.ipamd)
	r.base = r.snapshot(NodeNS)
	return r
}

// plugENIs gives the recording node its ENIs as an instance's OS and
// ipamd leave them (the plugin tears down only addresses in their
// subnets): eth0 primary, 10.0.1.0/24 and 2001:db8:1:2::/64 with the
// default routes; eth1 secondary, 10.0.2.0/24 with rule 32765 to table 2.
// The replay rebuilds its node from the journal, with other own addresses.
func (r *recording) plugENIs() {
	h, err := r.k.Open(NodeNS)
	if err != nil {
		r.t.Fatal(err)
	}
	defer h.Close()
	must := func(err error) {
		if err != nil {
			r.t.Fatal(err)
		}
	}
	for d, addrs := range [][]string{{"10.0.1.5/24", "2001:db8:1:2::5/64"}, {"10.0.2.5/24"}} {
		name := fmt.Sprintf("eth%d", d)
		idx, err := r.k.AddDevice(NodeNS, name, 9001, nil)
		must(err)
		must(h.LinkSetUp(name))
		for _, a := range addrs {
			p := netip.MustParsePrefix(a)
			must(h.AddrAdd(idx, &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
		}
		if d == 0 {
			must(h.RouteAdd(kernel.Route{Gw: net.ParseIP("10.0.1.1").To4(), LinkIndex: idx, Family: kernel.FamilyV4}))
			must(h.RouteAdd(kernel.Route{Gw: net.ParseIP("fe80::1"), LinkIndex: idx, Family: kernel.FamilyV6}))
		}
	}
	must(h.RuleAdd(kernel.Rule{Priority: 32765, Family: kernel.FamilyV4, Src: &net.IPNet{IP: net.IP{10, 0, 2, 5}, Mask: net.CIDRMask(32, 32)}, Table: 2}))
}

func (r *recording) setBackend(c rpc.CNIBackendClient) {
	r.p = plugin.New(plugin.Env{Kernel: r.k.Opener(NodeNS), Version: "test",
		Dial: func(string) (rpc.CNIBackendClient, io.Closer, error) { return c, nop{}, nil }})
}

func (r *recording) snapshot(path string) kernel.State {
	h, err := r.k.Open(path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer h.Close()
	s, err := kernel.Snapshot(h)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *recording) conf(prev []byte) []byte {
	c := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "journalFile": r.path,
		"pluginLogFile": filepath.Join(r.t.TempDir(), "plugin.log"), "stateDir": r.stateDir}
	if prev != nil {
		c["prevResult"] = json.RawMessage(prev)
	}
	for k, v := range r.extra {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return b
}

func netnsOf(pod string) string { return "/var/run/netns/cni-" + pod }

func (r *recording) args(pod string, netns string, prev []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "cid-" + pod, Netns: netns, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod, StdinData: r.conf(prev)}
}

func (r *recording) add(pod string) {
	if err := r.k.AddNamespace(netnsOf(pod)); err != nil {
		r.t.Fatal(err)
	}
	res, err := r.p.Add(r.args(pod, netnsOf(pod), nil))
	if err != nil {
		r.t.Fatalf("ADD %s: %v", pod, err)
	}
	var b bytes.Buffer
	res.PrintTo(&b)
	r.results[pod] = b.Bytes()
}

// stopp is containerd's first DEL (netns, prevResult); rmp its second.
func (r *recording) stopp(pod string) {
	if err := r.p.Del(r.args(pod, netnsOf(pod), r.results[pod])); err != nil {
		r.t.Fatalf("DEL %s: %v", pod, err)
	}
}

func (r *recording) rmp(pod string) {
	if err := r.p.Del(r.args(pod, "", nil)); err != nil {
		r.t.Fatalf("second DEL %s: %v", pod, err)
	}
}

func (r *recording) entries() []journal.Entry {
	f, err := os.Open(r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	es, err := journal.Read(f)
	if err != nil {
		r.t.Fatal(err)
	}
	return es
}

// replaysFaithfully replays the recording's journal with vpccni's flow
// and requires it clean, without divergence, ending in the recording's
// objects.
func (r *recording) replaysFaithfully() *Report {
	r.t.Helper()
	rep, err := Play(r.entries(), Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	if rep.Verdict() != "clean" || rep.Divergences != 0 {
		r.t.Fatalf("verdict %s, %d divergences %v\n%s", rep.Verdict(), rep.Divergences, rep.Violations, dump(rep))
	}
	if want := r.left(); !equalLeft(rep.Left, want) {
		r.t.Fatalf("replay left\n%v\nthe recording left\n%v", rep.Left, want)
	}
	return rep
}

// left is what the journal's invocations left in the recording's kernel,
// as Play reports it.
func (r *recording) left() map[string][]string {
	out := map[string][]string{}
	if add, _ := kernel.Diff(r.base, r.snapshot(NodeNS)); len(add) > 0 {
		out[NodeNS] = add
	}
	if err := r.k.AddNamespace("fresh"); err != nil {
		r.t.Fatal(err)
	}
	fresh := r.snapshot("fresh")
	r.k.DeleteNamespace("fresh")
	for _, ns := range r.k.Namespaces() {
		if ns == NodeNS {
			continue
		}
		if add, _ := kernel.Diff(fresh, r.snapshot(ns)); len(add) > 0 {
			out[ns] = add
		}
	}
	return out
}

// eviction records #2048 as containerd sees it: two pods (device 0 and
// device 1) and a third; aws-node evicted before stopp; back with no
// memory for rmp; a pod whose sandbox vanished before its DEL.
func eviction(t testing.TB) *recording {
	r := newRecording(t)
	for i := 0; i < 6; i++ {
		r.add(fmt.Sprintf("web-%d", i))
	}
	if err := r.p.Check(r.args("web-0", netnsOf("web-0"), r.results["web-0"])); err != nil {
		t.Fatal(err)
	}
	r.ipamd.down = true
	r.stopp("web-0")
	r.stopp("web-5") // device 1: rules 512 and 1536
	r.ipamd.down = false
	r.ipamd.held = map[string]*rpc.IPAllocationMetadata{} // restarted without its checkpoint
	if err := r.k.DeleteNamespace(netnsOf("web-0")); err != nil {
		t.Fatal(err)
	}
	r.rmp("web-0")
	r.rmp("web-5")
	r.add("web-6")
	// web-1's sandbox is gone before its DEL (the runtime crashed).
	if err := r.k.DeleteNamespace(netnsOf("web-1")); err != nil {
		t.Fatal(err)
	}
	// A CHECK of the vanished sandbox fails (code 8): the replay must
	// have removed the namespace too.
	if err := r.p.Check(r.args("web-1", netnsOf("web-1"), r.results["web-1"])); err == nil {
		t.Fatal("CHECK of a pod whose namespace is gone succeeded")
	}
	r.stopp("web-1") // ipamd forgot it too
	r.stopp("web-6")
	return r
}

// TestPlaybackReproducesTheRecordedKernel: replayed with vpccni's flow,
// the journal ends in the kernel objects the recording ended in, every
// invocation does what it did, and the invariants hold.
func TestPlaybackReproducesTheRecordedKernel(t *testing.T) {
	r := eviction(t)
	es := r.entries()
	if len(es) != 15 {
		t.Fatalf("%d entries, want 15", len(es))
	}
	rep, err := Play(es, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict() != "clean" || rep.Divergences != 0 {
		t.Fatalf("verdict %s, %d divergences: %+v\n%s", rep.Verdict(), rep.Divergences, rep.Violations, dump(rep))
	}
	want := r.left()
	if !equalLeft(rep.Left, want) {
		t.Fatalf("replay left\n%v\nthe recording left\n%v", rep.Left, want)
	}
	if len(rep.Removed) != 0 {
		t.Fatalf("removed %v", rep.Removed)
	}
	states := map[string]string{}
	for _, p := range rep.Pods {
		states[p.Name] = p.State
	}
	if states["default/web-0"] != StateDeleted || states["default/web-2"] != StateLive || states["default/web-1"] != StateDeleted {
		t.Fatalf("pod states %v", states)
	}
	// ipamd forgot web-0, web-1 and web-5 (no release); web-6's DEL
	// released it; web-2, web-3 and web-4 are live.
	if rep.IPs.Assigned != 7 || rep.IPs.Released != 1 || len(rep.IPs.Held) != 3 {
		t.Fatalf("accounting %+v", rep.IPs)
	}
	// The step of web-5's first DEL removed its rules 512 and 1536.
	var s *Step
	for _, st := range rep.Steps {
		if st.Verb == "DEL" && st.Pod == "default/web-5" && s == nil {
			s = st
		}
	}
	if s == nil || !contains(s.Removed, "node: rule 1536: from 10.0.2.11 lookup 2") || !contains(s.Removed, "node: rule 512: from all to 10.0.2.11 lookup main") {
		t.Fatalf("web-5's DEL step: %+v", s)
	}
	if !strings.Contains(strings.Join(s.Ipamd, ","), "DelNetwork unreachable") {
		t.Fatalf("web-5's DEL ipamd calls %v", s.Ipamd)
	}
}

// TestPlaybackCatchesTheLegacyLeak: the same journal under the
// reference's pre-fix DEL leaks what #2048 leaked: the first DEL fails
// without teardown, rmp's DEL gets "unknown pod" and returns success.
func TestPlaybackCatchesTheLegacyLeak(t *testing.T) {
	r := eviction(t)
	for _, name := range []string{"ref-v1.10", "ref-v1.11"} {
		pol, err := policy.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Play(r.entries(), Options{Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Verdict() != invariant.Leak {
			t.Fatalf("%s: verdict %s\n%s", name, rep.Verdict(), dump(rep))
		}
		var leaks []string
		for _, v := range rep.Violations {
			if v.Kind == invariant.Leak {
				leaks = append(leaks, v.What)
			}
		}
		all := strings.Join(leaks, "\n")
		for _, want := range []string{"rule 512 to 10.0.2.11/32 lookup main (default/web-5, deleted)", "rule 1536 from 10.0.2.11/32 lookup 2 (default/web-5, deleted)"} {
			if !strings.Contains(all, want) {
				t.Errorf("%s: no %q in\n%s", name, want, all)
			}
		}
		if rep.Divergences == 0 {
			t.Errorf("%s: the legacy flow's failed first DEL is not reported as a divergence", name)
		}
	}
}

// TestPlaybackDivergesOnAChangedRecord: an ipamd answer edited in the
// journal (another address) makes vpccni's own replay diverge.
func TestPlaybackDivergesOnAChangedRecord(t *testing.T) {
	es := eviction(t).entries()
	es[0].Ipamd[0].Reply = json.RawMessage(strings.Replace(string(es[0].Ipamd[0].Reply), "10.0.1.11", "10.0.1.99", 1))
	rep, err := Play(es, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The recorded DELs then name 10.0.1.11, so the replay leaks
	// 10.0.1.99 too: the verdict is the more serious LEAK.
	if rep.Verdict() == "clean" || rep.Divergences == 0 || !strings.Contains(strings.Join(rep.Steps[0].Diverged, "\n"), "10.0.1.99") {
		t.Fatalf("verdict %s, first step %+v", rep.Verdict(), rep.Steps[0])
	}
}

// TestPlaybackDivergesOnAnotherMethod: a call the journal records for
// another method is not answered with that method's reply.
func TestPlaybackDivergesOnAnotherMethod(t *testing.T) {
	es := eviction(t).entries()
	es[0].Ipamd[0].Method = "DelNetwork"
	rep, err := Play(es, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Join(rep.Steps[0].Diverged, "\n")
	if !strings.Contains(d, "the replay called AddNetwork where the journal records DelNetwork") || !strings.HasPrefix(rep.Steps[0].Replayed, "error 11") {
		t.Fatalf("first step %+v", rep.Steps[0])
	}
}

// TestPlaybackWritesNoFile: the recorded pluginLogFile and journalFile
// are not written by the replay.
func TestPlaybackWritesNoFile(t *testing.T) {
	r := eviction(t)
	before, _ := os.ReadFile(r.path)
	if _, err := Play(r.entries(), Options{}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(r.path)
	if !bytes.Equal(before, after) {
		t.Fatal("the replay appended to the recorded journal")
	}
	// The recorded stateDir is the recording node's: its records are gone
	// with its pods, and the replay's ADDs must not bring them back.
	if err := os.RemoveAll(r.stateDir); err != nil {
		t.Fatal(err)
	}
	if _, err := Play(r.entries(), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.stateDir); !os.IsNotExist(err) {
		t.Fatalf("the replay wrote into the recorded stateDir %s (%v)", r.stateDir, err)
	}
}

func equalLeft(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\n") != strings.Join(b[k], "\n") {
			return false
		}
	}
	return true
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func dump(r *Report) string {
	b, _ := json.MarshalIndent(r, "", " ")
	return string(b)
}

// FuzzPlay: a journal the reader accepts replays to a report or an error
// naming the entry; never a panic.
func FuzzPlay(f *testing.F) {
	r := eviction(f)
	b, _ := os.ReadFile(r.path)
	lines := strings.SplitAfter(string(b), "\n")
	// Short seeds: an ADD, the eviction's DEL, and a DEL naming a relative
	// namespace.
	f.Add(lines[0] + lines[7])
	f.Add(lines[0] + strings.Replace(lines[7], "/var/run/netns/", "node/", -1))
	f.Fuzz(func(t *testing.T, s string) {
		es, err := journal.Read(strings.NewReader(s))
		if err != nil || len(es) == 0 || len(es) > 50 {
			return
		}
		if _, err := Play(es, Options{}); err != nil && !strings.HasPrefix(err.Error(), "entry ") {
			t.Fatalf("error not naming its entry: %v", err)
		}
	})
}
