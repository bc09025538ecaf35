package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vpccni/vpccni/ownership"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/plugin/driver"
)

// The hostile-prevResult world: a node on the kernel model with two ENIs,
// foreign rules at the pod priorities, a live neighbour pod and the victim
// pod whose DEL gets a crafted prevResult. Everything is made through the
// plugin's own ADD, so the objects are exactly the binary's.

const (
	hostileNode = "node"
	victimName  = "web-1" // testArgs' pod: its host veth is testHostVeth
	neighName   = "web-2"
)

// fakeIpamd hands out fixed addresses and records releases. It answers
// DelNetwork as ipamd does: with the pod's allocation, once.
type fakeIpamd struct {
	mu       sync.Mutex
	alloc    map[string]*rpc.IPAllocationMetadata
	released []string
	// proofs are the host veth ifindexes the releases offered, by pod.
	proofs map[string]int32
}

func (f *fakeIpamd) AddNetwork(_ context.Context, req *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	md, ok := f.alloc[req.K8S_POD_NAME]
	if !ok {
		return &rpc.AddNetworkReply{Success: false}, nil
	}
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, nil
}

func (f *fakeIpamd) DelNetwork(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, req.K8S_POD_NAME)
	if f.proofs == nil {
		f.proofs = map[string]int32{}
	}
	f.proofs[req.K8S_POD_NAME] = req.GetHostVethIndex()
	md, ok := f.alloc[req.K8S_POD_NAME]
	if !ok {
		return nil, status.Error(codes.NotFound, unknownPodText)
	}
	delete(f.alloc, req.K8S_POD_NAME)
	return &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, nil
}

// hostilePod is one pod of the world.
// ListAllocations is the record vpccni's ipamd keeps: what each sandbox
// holds, asked without releasing it.
func (f *fakeIpamd) ListAllocations(_ context.Context, req *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &rpc.ListAllocationsReply{}
	for name, md := range f.alloc {
		a := &rpc.Allocation{NetworkName: "aws-cni", ContainerId: "c-" + name, IfName: "eth0", Ip: md.IPv4Addr,
			PodNamespace: "default", PodName: name, DeviceNumber: md.DeviceNumber, RouteTable: md.RouteTableId}
		if req.GetContainerId() == "" || req.GetContainerId() == a.ContainerId {
			out.Allocations = append(out.Allocations, a)
		}
	}
	return out, nil
}

func (f *fakeIpamd) PoolStatus(context.Context, *rpc.PoolStatusRequest) (*rpc.PoolStatusReply, error) {
	return nil, status.Error(codes.Unimplemented, "not here")
}

type hostilePod struct {
	name, netns string
	ip          string
	result      map[string]any // its ADD result, as JSON
	lines       []string       // the node lines its ADD made
}

func (p *hostilePod) args() string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.name + ";K8S_POD_INFRA_CONTAINER_ID=c-" + p.name
}

func (p *hostilePod) cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c-" + p.name, Netns: p.netns, IfName: "eth0", Args: p.args(), StdinData: stdin}
}

type hostileWorld struct {
	// format is the netconf's resultFormat, for the ADDs and the DEL.
	format        string
	stateDir      string
	k             *model.Kernel
	node          kernel.API
	ipamd         *fakeIpamd
	p             *Plugin
	victim, neigh *hostilePod
}

// foreignRules are somebody else's rules at the pod path's priorities,
// added before any pod so that the kernel lists them first at equal
// priority (where a delete request meets them first). The third names the
// victim's own address; it is not the victim's because its table is local,
// which no pod rule ever uses, and a delete request of the pod's rule
// names table main and so cannot reach it.
func foreignRules(victimIP string) []kernel.Rule {
	v4, v6 := kernel.FamilyV4, kernel.FamilyV6
	return []kernel.Rule{
		{Priority: ownership.PrioToPod, Family: v4, Dst: mustNet("10.0.0.0/24"), Table: kernel.TableMain},
		{Priority: ownership.PrioFromPod, Family: v4, Src: mustNet("192.168.7.7/32"), Table: 2},
		{Priority: ownership.PrioToPod, Family: v4, Dst: mustNet(victimIP + "/32"), Table: kernel.TableLocal},
		{Priority: ownership.PrioToPod, Family: v6, Dst: mustNet("2001:db8::/64"), Table: kernel.TableMain},
		{Priority: ownership.PrioFromPod, Family: v6, Src: mustNet("2001:db8::7/128"), Table: 2},
	}
}

func mustNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// hostileDriver is the driver under test: the plugin's own, or, when
// VPCCNI_HOSTILE_MUTANT=no-ownership-check, one whose ownership check
// (driver.StepCheckHolder: "whose veth does the IP's host route point
// at?") is skipped, to watch the corpus fail.
func hostileDriver() driver.Networker {
	if os.Getenv("VPCCNI_HOSTILE_MUTANT") == "no-ownership-check" {
		return noOwnershipCheck()
	}
	return driver.New(nil)
}

// noOwnershipCheck is the mutant: every address the source names is
// treated as still this pod's.
func noOwnershipCheck() driver.Networker {
	fp := &failpoint.Set{}
	if err := driver.SkipSteps(fp, driver.StepCheckHolder); err != nil {
		panic(err)
	}
	return driver.New(nil).WithFailpoints(fp)
}

// newHostileWorld builds the node, the foreign rules and routes, then ADDs
// the neighbour and the victim through the plugin. victimDevice 0 puts the
// victim on the primary ENI (table main), 1 on eth1 (table 2).
// extra rules are added with the foreign ones.
func newHostileWorld(t *testing.T, drv driver.Networker, victimDevice int, extra ...kernel.Rule) *hostileWorld {
	t.Helper()
	return newHostileWorldIn(t, ResultFormatReference, drv, victimDevice, extra...)
}

// newHostileWorldIn is newHostileWorld with the netconf's resultFormat.
func newHostileWorldIn(t *testing.T, format string, drv driver.Networker, victimDevice int, extra ...kernel.Rule) *hostileWorld {
	t.Helper()
	w := &hostileWorld{format: format, stateDir: t.TempDir(), k: model.New(), ipamd: &fakeIpamd{alloc: map[string]*rpc.IPAllocationMetadata{
		neighName: {IPv4Addr: "10.0.2.12", DeviceNumber: 1, RouteTableId: 2},
	}}}
	w.neigh = &hostilePod{name: neighName, netns: "/var/run/netns/" + neighName, ip: "10.0.2.12"}
	w.victim = &hostilePod{name: victimName, netns: "/var/run/netns/" + victimName, ip: "10.0.2.11"}
	w.ipamd.alloc[victimName] = &rpc.IPAllocationMetadata{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}
	if victimDevice == 0 {
		w.victim.ip = "10.0.1.11"
		w.ipamd.alloc[victimName] = &rpc.IPAllocationMetadata{IPv4Addr: "10.0.1.11", DeviceNumber: 0, RouteTableId: kernel.TableMain}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.k.AddNamespace(hostileNode))
	var err error
	w.node, err = w.k.Open(hostileNode)
	must(err)
	// The node as ipamd leaves it: eth0 with the default route, eth1 with
	// table 2 and its rule 32765.
	for d, dev := range []string{"eth0", "eth1"} {
		idx, err := w.k.AddDevice(hostileNode, dev, 9001, nil)
		must(err)
		must(w.node.LinkSetUp(dev))
		must(w.node.AddrAdd(idx, &net.IPNet{IP: net.IPv4(10, 0, byte(d+1), 10).To4(), Mask: net.CIDRMask(24, 32)}))
		gw := net.IPv4(10, 0, byte(d+1), 1).To4()
		table := kernel.TableMain
		if d == 1 {
			table = 2
			must(w.node.RouteAdd(kernel.Route{Table: 2, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, LinkIndex: idx, Scope: kernel.ScopeLink}))
			must(w.node.RuleAdd(kernel.Rule{Priority: 32765, Src: mustNet("10.0.2.10/32"), Table: 2}))
			must(w.node.RouteAdd(kernel.Route{Table: 2, Dst: mustNet("192.168.7.0/24"), LinkIndex: idx, Scope: kernel.ScopeLink}))
		}
		must(w.node.RouteAdd(kernel.Route{Table: table, Gw: gw, LinkIndex: idx, Family: kernel.FamilyV4}))
	}
	for _, r := range append(foreignRules(w.victim.ip), extra...) {
		must(w.node.RuleAdd(r))
	}
	w.p = New(Env{Kernel: w.k.Opener(hostileNode), Driver: drv, Version: "hostile",
		Dial: func(string) (rpc.CNIBackendClient, io.Closer, error) { return w.ipamd, nopCloser{}, nil },
		DialInventory: func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
			return w.ipamd, nil, nopCloser{}, nil
		},
		IsHostNS: func(path string) (bool, error) { return path == hostileNode, nil }})
	for _, p := range []*hostilePod{w.neigh, w.victim} {
		must(w.k.AddNamespace(p.netns))
		before := w.snap(t, hostileNode)
		res, err := w.p.Add(p.cmdArgs(hostileConf(t, w, w.format, nil)))
		if err != nil {
			t.Fatalf("ADD %s: %v", p.name, err)
		}
		b, err := json.Marshal(res)
		must(err)
		must(json.Unmarshal(b, &p.result))
		p.lines, _ = kernel.Diff(before, w.snap(t, hostileNode))
	}
	// Host veth, host route, rule 512, and off the main table rule 1536:
	// a case that "removes the victim" must remove something real.
	want := 4
	if victimDevice == 0 {
		want = 3
	}
	if len(w.victim.lines) != want {
		t.Fatalf("the victim's ADD made %q, want %d lines", w.victim.lines, want)
	}
	return w
}

// hostileConf is the world's netconf: its ADDs and DELs share the world's
// stateDir, so the victim's DEL has its attachment record as a source.
func hostileConf(t *testing.T, w *hostileWorld, format string, prev any) []byte {
	c := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "ipamdTimeout": "200ms", "resultFormat": format,
		"stateDir": w.stateDir}
	if prev != nil {
		c["prevResult"] = prev
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (w *hostileWorld) snap(t *testing.T, ns string) kernel.State {
	t.Helper()
	h, err := w.k.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := kernel.Snapshot(h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// genuine is a deep copy of the victim's ADD result, to be mutated.
func (w *hostileWorld) genuine() map[string]any {
	b, _ := json.Marshal(w.victim.result)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// outcome is what a case must get.
type outcome struct {
	code     uint // CNI error code; 0 is success
	tornDown bool // the victim's objects go (the node lines its ADD made, its eth0)
	// kept: lines of the victim that stay although it is torn down, because
	// the (accepted) input said less than the truth.
	kept []string
	// alsoRemoved: lines beyond the victim's that the case removes.
	alsoRemoved []string
	// eth0Kept: the teardown stopped short, so the victim's interface (and
	// its host veth, listed in kept) stays for the retry to read.
	eth0Kept bool
	released bool // ipamd was asked to release the victim
}

// hostileRun is one DEL and the evidence around it.
type hostileRun struct {
	err                     error
	node, neighNS, victimNS [2]kernel.State // before, after
	released                []string
	victimLines, neighLines []string
}

func (w *hostileWorld) del(t *testing.T, prev any) hostileRun {
	t.Helper()
	var r hostileRun
	r.node[0], r.neighNS[0], r.victimNS[0] = w.snap(t, hostileNode), w.snap(t, w.neigh.netns), w.snap(t, w.victim.netns)
	r.err = w.p.Del(w.victim.cmdArgs(hostileConf(t, w, w.format, prev)))
	r.node[1], r.neighNS[1], r.victimNS[1] = w.snap(t, hostileNode), w.snap(t, w.neigh.netns), w.snap(t, w.victim.netns)
	r.released = slices.Clone(w.ipamd.released)
	r.victimLines, r.neighLines = w.victim.lines, w.neigh.lines
	return r
}

// problems compares a run with the outcome it must have: the error code,
// and the node's State before and after, which must differ by exactly the
// victim's lines (when it is torn down) minus what it keeps, plus what the
// case declares; the neighbour's namespace must not change at all.
func (r hostileRun) problems(want outcome) []string {
	var out []string
	code := uint(0)
	var ce *types.Error
	switch {
	case r.err == nil:
	case errors.As(r.err, &ce):
		code = ce.Code
		if ce.Msg == "" {
			out = append(out, "CNI error without a message")
		}
	default:
		out = append(out, fmt.Sprintf("error %v is not a CNI error", r.err))
	}
	if code != want.code {
		out = append(out, fmt.Sprintf("DEL returned code %d (%v), want %d", code, r.err, want.code))
	}
	var wantGone []string
	if want.tornDown {
		wantGone = kernel.Minus(r.victimLines, want.kept)
	}
	wantGone = append(wantGone, want.alsoRemoved...)
	added, removed := kernel.Diff(r.node[0], r.node[1])
	if len(added) > 0 {
		out = append(out, fmt.Sprintf("node gained %q", added))
	}
	if extra := kernel.Minus(removed, wantGone); len(extra) > 0 {
		out = append(out, fmt.Sprintf("node lost what it must keep: %q", extra))
	}
	if missing := kernel.Minus(wantGone, removed); len(missing) > 0 {
		out = append(out, fmt.Sprintf("node kept what the case removes: %q", missing))
	}
	if a, rm := kernel.Diff(r.neighNS[0], r.neighNS[1]); len(a)+len(rm) > 0 {
		out = append(out, fmt.Sprintf("the neighbour's namespace changed: +%q -%q", a, rm))
	}
	victimEth0 := slices.ContainsFunc(r.victimNS[1].Links, func(l string) bool { return strings.HasPrefix(l, "link eth0 ") })
	switch {
	case want.tornDown && victimEth0 && !want.eth0Kept:
		out = append(out, "the victim's eth0 is still there")
	case want.eth0Kept && !victimEth0:
		out = append(out, "the victim's eth0 is gone, and with it what the retry needs")
	case !want.tornDown && r.victimNS[0].String() != r.victimNS[1].String():
		out = append(out, "the victim's namespace changed")
	}
	if released := slices.Contains(r.released, victimName); released != want.released {
		out = append(out, fmt.Sprintf("ipamd released the victim: %v, want %v", released, want.released))
	}
	return out
}
