package ipamd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// The branch pod of these tests is default/pod-sg (addReq("sg")).
func sgENI() podeni.BranchENI {
	mac, _ := net.ParseMAC("0A:1B:2C:3D:4E:5F")
	return podeni.BranchENI{ENIID: "eni-branch", VlanID: 7, MAC: mac,
		IPv4: netip.MustParseAddr("192.168.5.20"), SubnetV4: netip.MustParsePrefix("192.168.5.0/24"),
		IPv6: netip.MustParseAddr("2600:1f14:b::20"), SubnetV6: netip.MustParsePrefix("2600:1f14:b::/64")}
}

const trunkIfIndex = 42

// startBranch starts a daemon on an m5.large with a trunk ENI, whose
// branch pods are those of src.
func startBranch(t *testing.T, src podeni.Source, cfg Config) (*Daemon, rpcgrpc.CNIBackendClient) {
	t.Helper()
	c, err := memory.NewWithOptions("m5.large", memory.Options{Trunk: true})
	if err != nil {
		t.Fatal(err)
	}
	sock := sockPath(t)
	cfg.SocketPath, cfg.Inventory, cfg.PodENI = sock, c, src
	if cfg.TrunkLinkIndex == nil {
		cfg.TrunkLinkIndex = func() (int, error) { return trunkIfIndex, nil }
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d, client(t, sock)
}

func staticWithSG() *podeni.Static {
	s := podeni.NewStatic()
	s.Set("default", "pod-sg", sgENI())
	return s
}

func TestAddBranchPod(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprint("ipv6=", ipv6), func(t *testing.T) {
			d, c := startBranch(t, staticWithSG(), Config{IPv6: ipv6})
			r, err := c.AddNetwork(ctx(t), addReq("sg"))
			if err != nil {
				t.Fatal(err)
			}
			want := &rpc.AddNetworkReply{Success: true, PodVlanId: 7, PodENIMAC: "0a:1b:2c:3d:4e:5f", ParentIfIndex: trunkIfIndex,
				PodENISubnetGW:       "192.168.5.1",
				IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "192.168.5.20", DeviceNumber: -1, RouteTableId: 0}}}
			if ipv6 {
				want.PodENISubnetGW = "fe80:ec2::1"
				want.IPAllocationMetadata = []*rpc.IPAllocationMetadata{{IPv6Addr: "2600:1f14:b::20", DeviceNumber: -1, RouteTableId: 0}}
			}
			if !proto.Equal(r, want) {
				t.Fatalf("reply\n got %v\nwant %v", r, want)
			}
			if n := len(d.Allocations()); n != 0 {
				t.Fatalf("a branch pod took %d pool addresses", n)
			}
			// A regular pod beside it gets a pool address as usual.
			r, err = c.AddNetwork(ctx(t), addReq("web"))
			if err != nil || !r.Success || r.PodVlanId != 0 || r.PodENIMAC != "" || r.ParentIfIndex != 0 || len(r.IPAllocationMetadata) != 1 ||
				r.IPAllocationMetadata[0].DeviceNumber != 0 || len(d.Allocations()) != 1 {
				t.Fatalf("regular pod: %v %v", r, err)
			}
		})
	}
}

// TestAddBranchPodMultiNIC: like the reference, a branch pod gets its one
// interface whatever it asks for.
func TestAddBranchPodMultiNIC(t *testing.T) {
	_, c := startBranch(t, staticWithSG(), Config{})
	req := addReq("sg")
	req.RequiresMultiNICAttachment = true
	if r, err := c.AddNetwork(ctx(t), req); err != nil || !r.Success || r.PodVlanId != 7 {
		t.Fatalf("%v %v", r, err)
	}
}

// TestAddBranchPodRefused: everything that keeps a branch pod from its
// VLAN is Success=false with no RPC error and no address taken.
func TestAddBranchPodRefused(t *testing.T) {
	noV6 := sgENI()
	noV6.IPv6, noV6.SubnetV6 = netip.Addr{}, netip.Prefix{}
	cases := map[string]struct {
		src   func(*podeni.Static)
		cfg   Config
		plain bool   // memory.New: no trunk ENI on the instance
		want  string // the outcome and text the log must give
	}{
		"lookup error": {src: func(s *podeni.Static) { s.Fail("default", "pod-sg", errors.New("api server unavailable")) },
			want: "pod-eni-lookup-failed api server unavailable"},
		"pod not found": {src: func(s *podeni.Static) {
			s.Fail("default", "pod-sg", fmt.Errorf("%w: default/pod-sg", podeni.ErrPodNotFound))
		}, want: "pod-eni-lookup-failed podeni: pod not found: default/pod-sg"},
		"trunk index error": {cfg: Config{TrunkLinkIndex: func() (int, error) { return 0, errors.New("no link with that MAC") }},
			want: "no-trunk the trunk ENI's link index: no link with that MAC"},
		"trunk index zero": {cfg: Config{TrunkLinkIndex: func() (int, error) { return 0, nil }},
			want: "no-trunk the trunk ENI's link index is 0, not a link"},
		"no trunk ENI": {plain: true, want: "no-trunk the instance has no trunk ENI"},
		"ipv6 without ipv6": {src: func(s *podeni.Static) { s.Set("default", "pod-sg", noV6) }, cfg: Config{IPv6: true},
			want: "invalid-pod-eni IPv6 mode needs ipv6Addr and subnetV6Cidr"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			var mu sync.Mutex
			tc.cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
			src := staticWithSG()
			if tc.src != nil {
				tc.src(src)
			}
			var d *Daemon
			var c rpcgrpc.CNIBackendClient
			if tc.plain {
				sock := sockPath(t)
				tc.cfg.PodENI, tc.cfg.TrunkLinkIndex = src, func() (int, error) { return trunkIfIndex, nil }
				d = start(t, sock, tc.cfg)
				c = client(t, sock)
			} else {
				d, c = startBranch(t, src, tc.cfg)
			}
			r, err := c.AddNetwork(ctx(t), addReq("sg"))
			if err != nil || r.Success || len(r.IPAllocationMetadata) != 0 || r.PodVlanId != 0 || len(d.Allocations()) != 0 {
				t.Fatalf("%v %v, %d allocations", r, err, len(d.Allocations()))
			}
			mu.Lock()
			defer mu.Unlock()
			outcome, text, _ := strings.Cut(tc.want, " ")
			if logs := buf.String(); !strings.Contains(logs, "outcome="+outcome) || !strings.Contains(logs, text) {
				t.Fatalf("logs lack %q:\n%s", tc.want, logs)
			}
		})
	}
}

// TestAddBranchPodNoTrunkIndexFunc: a daemon told about branch pods but
// not how to find the trunk refuses them.
func TestAddBranchPodNoTrunkIndexFunc(t *testing.T) {
	c, _ := memory.NewWithOptions("m5.large", memory.Options{Trunk: true})
	sock := sockPath(t)
	d, err := New(Config{SocketPath: sock, Inventory: c, PodENI: staticWithSG()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("sg")); err != nil || r.Success {
		t.Fatalf("%v %v", r, err)
	}
}

// blockingSource blocks until the lookup's context ends.
type blockingSource struct{ ended chan error }

func (b blockingSource) Lookup(ctx context.Context, _, _ string) (*podeni.BranchENI, error) {
	<-ctx.Done()
	b.ended <- ctx.Err()
	return nil, ctx.Err()
}

// TestAddLookupBoundedByCall: the lookup ends with the plugin's call.
func TestAddLookupBoundedByCall(t *testing.T) {
	src := blockingSource{ended: make(chan error, 1)}
	_, c := startBranch(t, src, Config{})
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// The deadline travels with the call, so the server may answer
	// (Success=false) just before the client gives up.
	if r, err := c.AddNetwork(cctx, addReq("sg")); status.Code(err) != codes.DeadlineExceeded && (err != nil || r.Success) {
		t.Fatalf("call: %v %v", r, err)
	}
	select {
	case err := <-src.ended:
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("lookup ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup outlived the call")
	}
}

func TestDelBranchPod(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprint("ipv6=", ipv6), func(t *testing.T) {
			_, c := startBranch(t, staticWithSG(), Config{IPv6: ipv6})
			r, err := c.DelNetwork(ctx(t), delReq("sg"))
			want := &rpc.DelNetworkReply{Success: true, PodVlanId: 7,
				IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "192.168.5.20"}}}
			if ipv6 {
				want.IPAllocationMetadata = []*rpc.IPAllocationMetadata{{IPv6Addr: "2600:1f14:b::20"}}
			}
			if err != nil || !proto.Equal(r, want) {
				t.Fatalf("reply %v %v, want %v", r, err, want)
			}
		})
	}
}

func TestDelBranchOutcomes(t *testing.T) {
	src := staticWithSG()
	src.Fail("default", "pod-gone", fmt.Errorf("%w: default/pod-gone", podeni.ErrPodNotFound))
	src.Fail("default", "pod-err", errors.New("podeni: get pod default/pod-err: the server is currently unable to handle the request"))
	bad := sgENI()
	bad.IPv4 = netip.Addr{}
	src.Set("default", "pod-nov4", bad)
	_, c := startBranch(t, src, Config{})

	r, err := c.DelNetwork(ctx(t), delReq("gone"))
	if err != nil || !proto.Equal(r, &rpc.DelNetworkReply{Success: true}) {
		t.Fatalf("pod gone: %v %v, want Success and nothing else", r, err)
	}
	_, err = c.DelNetwork(ctx(t), delReq("err"))
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "unable to handle the request") {
		t.Fatalf("lookup error: %v", err)
	}
	_, err = c.DelNetwork(ctx(t), delReq("nov4"))
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "no IPv4 address") {
		t.Fatalf("branch ENI without the mode's address: %v", err)
	}
	_, err = c.DelNetwork(ctx(t), delReq("regular"))
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "datastore: unknown pod" {
		t.Fatalf("regular pod: %v", err)
	}
}

// countingSource counts lookups.
type countingSource struct {
	podeni.Source
	n atomic.Int32
}

func (c *countingSource) Lookup(ctx context.Context, ns, name string) (*podeni.BranchENI, error) {
	c.n.Add(1)
	return c.Source.Lookup(ctx, ns, name)
}

// TestDelHeldKeySkipsLookup: a key the datastore holds is released from
// it, without asking the API server.
func TestDelHeldKeySkipsLookup(t *testing.T) {
	src := &countingSource{Source: staticWithSG()}
	d, c := startBranch(t, src, Config{})
	add, err := c.AddNetwork(ctx(t), addReq("web"))
	if err != nil || !add.Success {
		t.Fatal(add, err)
	}
	before := src.n.Load()
	r, err := c.DelNetwork(ctx(t), delReq("web"))
	if err != nil || !r.Success || r.PodVlanId != 0 || !proto.Equal(r.IPAllocationMetadata[0], add.IPAllocationMetadata[0]) {
		t.Fatalf("DEL: %v %v", r, err)
	}
	if src.n.Load() != before || len(d.Allocations()) != 0 {
		t.Fatalf("lookups %d -> %d, %d allocations", before, src.n.Load(), len(d.Allocations()))
	}
}

// TestPodENIDisabled: without a Source a branch pod is a regular pod, as
// with ENABLE_POD_ENI=false.
func TestPodENIDisabled(t *testing.T) {
	sock := sockPath(t)
	start(t, sock, Config{TrunkLinkIndex: func() (int, error) { return trunkIfIndex, nil }})
	c := client(t, sock)
	if r, err := c.AddNetwork(ctx(t), addReq("sg")); err != nil || !r.Success || r.PodVlanId != 0 || r.IPAllocationMetadata[0].DeviceNumber != 0 {
		t.Fatalf("%v %v", r, err)
	}
	if _, err := c.DelNetwork(ctx(t), delReq("other")); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown pod: %v", err)
	}
}

// TestBranchLogs: each branch decision is one record with the pod, the
// VLAN where known, and the outcome.
func TestBranchLogs(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	src := staticWithSG()
	src.Fail("default", "pod-gone", fmt.Errorf("%w: default/pod-gone", podeni.ErrPodNotFound))
	_, c := startBranch(t, src, Config{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)),
		TrunkLinkIndex: func() (int, error) { return trunkIfIndex, nil }})
	c.AddNetwork(ctx(t), addReq("sg"))
	c.DelNetwork(ctx(t), delReq("sg"))
	c.AddNetwork(ctx(t), addReq("gone"))
	c.DelNetwork(ctx(t), delReq("gone"))
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, rec := range opRecords(t, buf.Bytes()) {
		line := rec["_line"]
		got = append(got, fmt.Sprint(rec["op"], ":", rec["pod"], ":", rec["vlan"], ":", rec["outcome"]))
		if o := rec["outcome"]; o == outcomeBranchAssigned && (rec["mac"] != "0a:1b:2c:3d:4e:5f" || rec["parentIfIndex"] != 42.0 || rec["ip"] != "192.168.5.20") {
			t.Errorf("assignment record: %s", line)
		}
		if o := rec["outcome"]; o == outcomeBranchLookup && !strings.Contains(fmt.Sprint(rec["error"]), "pod not found") {
			t.Errorf("lookup record: %s", line)
		}
	}
	want := "[AddNetwork:default/pod-sg:7:branch-eni-assigned DelNetwork:default/pod-sg:7:branch-eni-released " +
		"AddNetwork:default/pod-gone:<nil>:pod-eni-lookup-failed DelNetwork:default/pod-gone:<nil>:pod-gone]"
	if fmt.Sprint(got) != want {
		t.Errorf("records\n got %v\nwant %s", got, want)
	}
}
