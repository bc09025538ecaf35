package plugin

import (
	"context"
	"errors"
	"github.com/vpccni/vpccni/ownership"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/driver"
)

var addReplyDev1 = &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}}}

func wantPod(table int) driver.Pod {
	p := prevPod
	p.MTU = DefaultMTU
	p.MACSeed = "c1"
	p.IPs = []driver.PodIP{{Addr: podIP, Table: table}}
	return p
}

func TestAddBuildsPodAndResult(t *testing.T) {
	for _, ver := range []string{"0.3.1", "0.4.0", "1.0.0"} {
		t.Run(ver, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(true)
			r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
				func(_ context.Context, req *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
					if req.ContainerID != "c1" || req.IfName != "eth0" || req.NetworkName != "aws-cni" || req.Netns != testNetns || req.K8S_POD_NAME != "web-1" {
						t.Errorf("request %v", req)
					}
					return addReplyDev1, nil
				})
			r.drv.EXPECT().Setup(r.host, r.pod, wantPod(2)).Return(nil)
			res, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"cniVersion": ver})))
			if err != nil {
				t.Fatal(err)
			}
			if res.Version() != ver {
				t.Fatalf("result version %s, want %s", res.Version(), ver)
			}
			// The result decodes back to the same teardown state.
			st, err := decodeCleanupState(inFormat(ResultFormatReference, res), "eth0", "default", "web-1", "eni")
			if err != nil {
				t.Fatal(err)
			}
			if st.DeviceNumber != 1 || st.VlanID != 0 || st.Pod.HostVeth != testHostVeth || len(st.Pod.IPs) != 1 || st.Pod.IPs[0] != (driver.PodIP{Addr: podIP, Table: 2}) {
				t.Fatalf("round trip: %+v", st)
			}
		})
	}
}

// TestAddResultLayout pins the reference's layout (docs/reference-facts.md#cleanup-state).
func TestAddResultLayout(t *testing.T) {
	res := encodeResult(wantPod(2), testNetns, 1, "default", "web-1")
	got := []string{}
	for _, i := range res.Interfaces {
		got = append(got, i.Name+"|"+i.Mac+"|"+i.Sandbox)
	}
	want := "eni0761ccbeace||,eth0|2|" + testNetns + ",dummy0761ccbeace|0|1"
	if strings.Join(got, ",") != want {
		t.Fatalf("interfaces %v\nwant %s", got, want)
	}
	if len(res.IPs) != 1 || *res.IPs[0].Interface != 1 || res.IPs[0].Address.String() != "10.0.2.11/32" || res.IPs[0].Gateway != nil {
		t.Fatalf("ips %+v", res.IPs)
	}
}

func TestAddRollsBackAndReleases(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	gomock.InOrder(
		r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(addReplyDev1, nil),
		r.drv.EXPECT().Setup(r.host, r.pod, wantPod(2)).Return(errors.New("pod-address: EEXIST")),
		r.drv.EXPECT().Teardown(r.host, r.pod, wantPod(2)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
				if req.Reason != ReasonSetupNSFailed {
					t.Errorf("reason %q", req.Reason)
				}
				return okDelReply, nil
			}),
	)
	_, err := r.p.Add(cmdArgs(netconf(t, nil)))
	wantCode(t, err, ErrSetupFailed)
}

// TestAddKeepsAddressWhenRollbackFails: never hand an address back while
// its objects are still in the kernel.
func TestAddKeepsAddressWhenRollbackFails(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(addReplyDev1, nil)
	r.drv.EXPECT().Setup(gomock.Any(), gomock.Any(), gomock.Any()).Return(errors.New("boom"))
	r.drv.EXPECT().Teardown(gomock.Any(), gomock.Any(), gomock.Any()).Return(driver.Report{}, errors.New("boom"))
	_, err := r.p.Add(cmdArgs(netconf(t, nil)))
	wantCode(t, err, ErrSetupFailed)
	if r.dials != 1 {
		t.Fatalf("dials = %d, want only the AddNetwork", r.dials)
	}
}

func TestAddIpamdOutcomes(t *testing.T) {
	cases := []struct {
		name  string
		reply *rpc.AddNetworkReply
		err   error
		code  uint
	}{
		{"unreachable", nil, status.Error(codes.Unavailable, "connection refused"), types.ErrTryAgainLater},
		{"timeout", nil, status.Error(codes.DeadlineExceeded, "deadline"), types.ErrTryAgainLater},
		{"error", nil, status.Error(codes.FailedPrecondition, "wrong client version"), ErrIpamd},
		{"pool empty", &rpc.AddNetworkReply{Success: false}, nil, ErrNoAddress},
		{"table local", &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", RouteTableId: 255}}}, nil, ErrIpamd},
		{"not an address", &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "127.0.0.1"}}}, nil, ErrIpamd},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(true)
			r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(c.reply, c.err)
			if c.reply != nil && c.reply.Success {
				r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(okDelReply, nil)
			}
			_, err := r.p.Add(cmdArgs(netconf(t, nil)))
			wantCode(t, err, c.code)
		})
	}
}

func TestAddRefusesHostNamespace(t *testing.T) {
	r := newRig(t)
	r.p.env.IsHostNS = func(string) (bool, error) { return true, nil }
	_, err := r.p.Add(cmdArgs(netconf(t, nil)))
	wantCode(t, err, types.ErrInvalidNetNS)
}

// TestAddRequiresThePodsName: without the pod's name two pods would share
// a host veth name and ipamd's record; nothing is opened or asked (the
// mocks fail on any call).
func TestAddRequiresThePodsName(t *testing.T) {
	for _, args := range []string{"IgnoreUnknown=1;K8S_POD_NAMESPACE=default", "IgnoreUnknown=1;K8S_POD_NAME=web-1", ""} {
		r := newRig(t)
		a := cmdArgs(netconf(t, nil))
		a.Args = args
		_, err := r.p.Add(a)
		wantCode(t, err, types.ErrInvalidEnvironmentVariables)
		if !strings.Contains(err.Error(), "K8S_POD_NAME") {
			t.Errorf("CNI_ARGS %q: the error does not name what is missing: %v", args, err)
		}
	}
}

// TestDecodeReferenceResults: results written by reference versions decode
// to the right teardown state (docs/reference-facts.md#cleanup-state,
// docs/reference-facts.md#issue-2048).
func TestDecodeReferenceResults(t *testing.T) {
	idx := func(i int) *int { return &i }
	mk := func(ifs ...*current.Interface) *current.Result {
		r := &current.Result{CNIVersion: "1.0.0", Interfaces: ifs}
		a, _ := types.ParseCIDR("10.0.2.11/32")
		r.IPs = []*current.IPConfig{{Interface: idx(1), Address: *a}}
		return r
	}
	cases := []struct {
		name  string
		res   *current.Result
		table int
		dev   int
	}{
		{"v1.20+ (mac = table)", mk(&current.Interface{Name: testHostVeth}, &current.Interface{Name: "eth0", Sandbox: testNetns, Mac: "2"},
			&current.Interface{Name: "dummy0761ccbeace", Mac: "0", Sandbox: "1"}), 2, 1},
		{"v1.12.1 (dummy sandbox = device)", mk(&current.Interface{Name: testHostVeth}, &current.Interface{Name: "eth0", Sandbox: testNetns},
			&current.Interface{Name: "dummy0761ccbeace", Mac: "0", Sandbox: "1"}), 2, 1},
		{"device 0", mk(&current.Interface{Name: testHostVeth}, &current.Interface{Name: "eth0", Sandbox: testNetns},
			&current.Interface{Name: "dummy0761ccbeace", Mac: "0", Sandbox: "0"}), 254, 0},
		{"v1.11 (#2048: no dummy)", mk(&current.Interface{Name: testHostVeth}, &current.Interface{Name: "eth0", Sandbox: testNetns}), ownership.TableUnknown, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := decodeCleanupState(inFormat(ResultFormatReference, c.res), "eth0", "default", "web-1", "eni")
			if err != nil {
				t.Fatal(err)
			}
			if st.DeviceNumber != c.dev || len(st.Pod.IPs) != 1 || st.Pod.IPs[0].Table != c.table {
				t.Fatalf("got %+v", st)
			}
		})
	}
}
