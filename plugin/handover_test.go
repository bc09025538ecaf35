package plugin

import (
	"context"
	"errors"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/driver"
)

// takenReply is vpccni's ipamd taking the veth pair of a DEL.
var takenReply = &rpc.DelNetworkReply{Success: true, HostVethTaken: true,
	IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}}}

// A DEL whose sandbox proved its veth, against vpccni's ipamd, removes
// the rules and the route, hands the veth pair over with its ifindex, and
// when ipamd takes it, is done: the plugin never deletes the veth.
func TestDelHandsTheVethToIpamd(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
				if !req.DeleteHostVeth || req.HostVethIndex != 7 {
					t.Errorf("DelNetwork DeleteHostVeth %v, HostVethIndex %d; want true, 7", req.DeleteHostVeth, req.HostVethIndex)
				}
				return takenReply, nil
			}),
	)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
		t.Fatalf("DEL = %v, want success", err)
	}
}

// The veth pair is handed over only to an ipamd that answered vpccni's
// question (a reference ipamd would release the address and leave the
// veth) and only when the sandbox's namespace proved which veth is its
// own; otherwise the first teardown deletes it.
func TestDelKeepsTheVethWhenIpamdCannotTakeIt(t *testing.T) {
	t.Run("reference ipamd", func(t *testing.T) {
		r := newRig(t)
		r.p.env.DialInventory = referenceInventory
		r.expectHandles(true)
		gomock.InOrder(
			r.drv.EXPECT().Inspect(r.host, r.pod, "eth0").Return(nil, nil),
			r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
			r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
				func(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
					if req.DeleteHostVeth {
						t.Error("a reference ipamd was handed the veth")
					}
					return okDelReply, nil
				}),
		)
		if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
			t.Fatalf("DEL = %v, want success", err)
		}
	})
	t.Run("namespace gone", func(t *testing.T) {
		r := newRig(t)
		r.expectHandles(false)
		gomock.InOrder(
			r.drv.EXPECT().Teardown(r.host, nil, prevPod).Return(driver.Report{}, nil),
			r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
				func(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
					if req.DeleteHostVeth {
						t.Error("a veth was handed over without a namespace proving it")
					}
					return okDelReply, nil
				}),
		)
		if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
			t.Fatalf("DEL = %v, want success", err)
		}
	})
}

// When ipamd does not take the veth pair (it could not be reached), the
// DEL deletes it before it queues the release, and fails if it cannot.
func TestDelDeletesTheVethIpamdDidNotTake(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(ipamdUnreachable),
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, errors.New("EBUSY")),
	)
	err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
	wantCode(t, err, 11)
}
