package plugin

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/driver"
)

var (
	podIP      = netip.MustParseAddr("10.0.2.11")
	prevPod    = driver.Pod{HostVeth: testHostVeth, ContainerIf: "eth0", IPs: []driver.PodIP{{Addr: podIP, Table: 2}}}
	okDelReply = &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}}}
)

// ipamd behaviours as a DelNetwork stub.
type delFn func(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error)

func replyWith(r *rpc.DelNetworkReply, err error) delFn {
	return func(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
		return r, err
	}
}

// hang is an ipamd that accepts and never answers: only the deadline ends it.
func hang(ctx context.Context, _ *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

var (
	ipamdOK          = replyWith(okDelReply, nil)
	ipamdUnreachable = replyWith(nil, status.Error(codes.Unavailable, "connection refused"))
	ipamdError       = replyWith(nil, status.Error(codes.Internal, "boom"))
	ipamdUnknownPod  = replyWith(nil, status.Error(codes.NotFound, "datastore: unknown pod"))
	// The reference ipamd returns a plain error whose text carries the marker.
	ipamdUnknownRef = replyWith(nil, status.Error(codes.Unknown, "1 error occurred:\n\t* datastore: unknown pod"))
)

// TestDelWithPrevResult: with a prevResult the pod is torn down from it
// first, and then — whatever ipamd does — DEL succeeds.
func TestDelWithPrevResult(t *testing.T) {
	cases := []struct {
		name  string
		ipamd delFn
	}{
		{"reply", ipamdOK},
		{"unreachable", ipamdUnreachable},
		{"error", ipamdError},
		{"timeout", hang},
		{"unknown pod", ipamdUnknownPod},
		{"unknown pod (reference text)", ipamdUnknownRef},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(true)
			gomock.InOrder(
				r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
				r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(c.ipamd),
				r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
			)
			err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
			if err != nil {
				t.Fatalf("DEL = %v, want success", err)
			}
		})
	}
}

// TestDelTeardownFailureKeepsAddress: a failed teardown returns a retryable
// error and does not release the address (its rules are still there).
func TestDelTeardownFailureKeepsAddress(t *testing.T) {
	r := newRig(t)
	r.expectHandles(false)
	r.drv.EXPECT().Teardown(r.host, nil, prevPod).Return(driver.Report{}, errors.New("EBUSY"))
	err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
	wantCode(t, err, types.ErrTryAgainLater)
	if r.dials != 0 {
		t.Fatalf("ipamd was called %d times after a failed teardown", r.dials)
	}
}

// TestDelReplyNamesExtraAddress: an address only ipamd knew is torn down too.
func TestDelReplyNamesExtraAddress(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	extra := &rpc.DelNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{
		{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}, {IPv4Addr: "10.0.2.12", DeviceNumber: 1, RouteTableId: 2}}}
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(extra, nil),
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
		r.drv.EXPECT().Teardown(r.host, r.pod, driver.Pod{HostVeth: testHostVeth, ContainerIf: "eth0",
			IPs: []driver.PodIP{{Addr: netip.MustParseAddr("10.0.2.12"), Table: 2}}}).Return(driver.Report{}, nil),
	)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
		t.Fatal(err)
	}
}

// TestDelWithoutPrevResult: ipamd is asked first; its reply is the source,
// else the pod namespace, else there is nothing to tear down — unless
// ipamd could not be asked: it may know what nothing else names (a branch
// pod's VLAN), so the DEL fails (code 11) for the runtime to retry.
func TestDelWithoutPrevResult(t *testing.T) {
	fromReply := driver.Pod{HostVeth: testHostVeth, ContainerIf: "eth0", IPs: []driver.PodIP{{Addr: podIP, Table: 2}}}
	inspected := &driver.Pod{HostVeth: testHostVeth, ContainerIf: "eth0", IPs: []driver.PodIP{{Addr: podIP, Table: 2}}}
	cases := []struct {
		name     string
		ipamd    delFn
		inspect  *driver.Pod // what the pod namespace shows (nil: nothing)
		teardown *driver.Pod
		tearErr  error
		wantCode uint // 0: success
		podAlive bool
	}{
		{name: "reply", ipamd: ipamdOK, teardown: &fromReply, podAlive: true},
		{name: "reply, teardown fails", ipamd: ipamdOK, teardown: &fromReply, tearErr: errors.New("EPERM"), wantCode: types.ErrTryAgainLater},
		{name: "unknown pod, namespace alive", ipamd: ipamdUnknownPod, inspect: inspected, teardown: inspected, podAlive: true},
		{name: "unknown pod, namespace gone", ipamd: ipamdUnknownPod},
		{name: "unreachable, namespace alive", ipamd: ipamdUnreachable, inspect: inspected, teardown: inspected, podAlive: true},
		{name: "unreachable, namespace gone", ipamd: ipamdUnreachable, wantCode: types.ErrTryAgainLater},
		{name: "timeout", ipamd: hang, wantCode: types.ErrTryAgainLater},
		{name: "error", ipamd: ipamdError, inspect: inspected, teardown: inspected, podAlive: true},
		{name: "reply without addresses", ipamd: replyWith(&rpc.DelNetworkReply{Success: true}, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(c.podAlive)
			r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(c.ipamd)
			var podH kernel.API
			if c.podAlive {
				podH = r.pod
			}
			// Without a prevResult or ipamd's record, the namespace is read
			// back first: a teardown from it comes before the release.
			if c.podAlive {
				r.drv.EXPECT().Inspect(r.host, podH, "eth0").Return(c.inspect, nil)
			}
			switch {
			case c.teardown != nil && c.inspect != nil:
				// Read back from the live namespace: the veth pair is left
				// for ipamd, which takes none here, so the DEL deletes it.
				gomock.InOrder(
					r.drv.EXPECT().Teardown(r.host, podH, leftVeth(*c.teardown)).Return(driver.Report{}, c.tearErr),
					r.drv.EXPECT().Teardown(r.host, podH, *c.teardown).Return(driver.Report{}, nil),
				)
			case c.teardown != nil:
				r.drv.EXPECT().Teardown(r.host, podH, *c.teardown).Return(driver.Report{}, c.tearErr)
			}
			err := r.p.Del(cmdArgs(netconf(t, nil)))
			if c.wantCode == 0 && err != nil {
				t.Fatalf("DEL = %v, want success", err)
			}
			if c.wantCode != 0 {
				wantCode(t, err, c.wantCode)
			}
		})
	}
}

// TestDelSendsTheRequest: the reference's fields reach ipamd, and the
// sandbox's proof of ownership: the peer of its eth0 (ifindex 7).
func TestDelSendsTheRequest(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, req *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
			want := &rpc.DelNetworkRequest{ClientVersion: "test", K8S_POD_NAME: "web-1", K8S_POD_NAMESPACE: "default",
				K8S_POD_INFRA_CONTAINER_ID: "c1", K8S_POD_UID: "u1", Reason: "PodDeleted", ContainerID: "c1", IfName: "eth0", NetworkName: "aws-cni",
				HostVethIndex: 7}
			if req.String() != want.String() {
				t.Errorf("request\n got %v\nwant %v", req, want)
			}
			return &rpc.DelNetworkReply{Success: true}, nil
		})
	r.drv.EXPECT().Inspect(r.host, r.pod, "eth0").Return(nil, nil)
	if err := r.p.Del(cmdArgs(netconf(t, nil))); err != nil {
		t.Fatal(err)
	}
}

// TestDelBadInputTouchesNothing: bad input is a CNI error with a code and
// nothing is opened, torn down or released (the mocks have no expectations,
// so any call fails the test).
func TestDelBadInputTouchesNothing(t *testing.T) {
	cases := []struct {
		name  string
		stdin []byte
		args  string
		code  uint
	}{
		{"netconf not JSON", []byte(`{"cniVersion":`), testArgs, types.ErrDecodingFailure},
		{"mtu not a number", netconf(t, map[string]any{"mtu": "jumbo"}), testArgs, types.ErrInvalidNetworkConfig},
		{"vethPrefix too long", netconf(t, map[string]any{"vethPrefix": "toolong"}), testArgs, types.ErrInvalidNetworkConfig},
		{"ipamdAddress off the node", netconf(t, map[string]any{"ipamdAddress": "10.1.2.3:50051"}), testArgs, types.ErrInvalidNetworkConfig},
		{"CNI_ARGS malformed", netconf(t, nil), "K8S_POD_NAME", types.ErrInvalidEnvironmentVariables},
		{"CNI_ARGS unknown key", netconf(t, nil), "FOO=bar", types.ErrInvalidEnvironmentVariables},
		{"prevResult interfaces not an array", netconf(t, map[string]any{"prevResult": map[string]any{"cniVersion": "1.0.0", "interfaces": "eth0"}}), testArgs, types.ErrDecodingFailure},
	}
	// A prevResult that parses as JSON but says what this plugin never
	// writes is set aside, not obeyed: plugin/hostile_test.go shows the
	// DEL then tears down what ipamd and the namespace prove, and fails
	// with code 7.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			a := cmdArgs(c.stdin)
			a.Args = c.args
			wantCode(t, r.p.Del(a), c.code)
			if r.dials != 0 {
				t.Fatal("ipamd was called")
			}
		})
	}
}

func wantCode(t *testing.T, err error, code uint) {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a CNI error", err)
	}
	if ce.Code != code {
		t.Fatalf("CNI error code %d (%s), want %d", ce.Code, ce.Error(), code)
	}
	if ce.Msg == "" {
		t.Fatal("CNI error without a message")
	}
}
