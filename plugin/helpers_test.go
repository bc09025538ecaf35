package plugin

import (
	"context"
	"encoding/json"
	"github.com/vpccni/vpccni/plugin/driver"
	"io"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/mocks/mock_driver"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
	"github.com/vpccni/vpccni/mocks/mock_rpc"
)

const (
	testNetns = "/var/run/netns/pod-1"
	testArgs  = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u1"
	// naming.HostVeth("eni", "default", "web-1")
	testHostVeth = "eni" + "0761ccbeace"
)

type rig struct {
	ctrl   *gomock.Controller
	drv    *mock_driver.MockNetworker
	client *mock_rpc.MockCNIBackendClient
	opener *mock_kernel.MockOpener
	host   *mock_kernel.MockAPI
	pod    *mock_kernel.MockAPI
	dials  int
	p      *Plugin
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

func newRig(t *testing.T) *rig {
	ctrl := gomock.NewController(t)
	r := &rig{ctrl: ctrl, drv: mock_driver.NewMockNetworker(ctrl), client: mock_rpc.NewMockCNIBackendClient(ctrl),
		opener: mock_kernel.NewMockOpener(ctrl), host: mock_kernel.NewMockAPI(ctrl), pod: mock_kernel.NewMockAPI(ctrl)}
	r.p = New(Env{Kernel: r.opener, Driver: r.drv, Version: "test",
		Dial:          func(string) (rpc.CNIBackendClient, io.Closer, error) { r.dials++; return r.client, nopCloser{}, nil },
		DialInventory: emptyInventory,
		IsHostNS:      func(string) (bool, error) { return false, nil }})
	// The node read while ipamd answers: none here, so the teardown, the
	// mock, is asked with the pod alone (TestDelReadsTheNodeWhileIpamdAnswers).
	r.drv.EXPECT().ReadNode(gomock.Any(), gomock.Any()).Return(nil, nil).AnyTimes()
	return r
}

// expectHandles: the node and pod namespaces open (pod gone if !podAlive).
func (r *rig) expectHandles(podAlive bool) {
	r.opener.EXPECT().Open("").Return(r.host, nil)
	r.host.EXPECT().Close().Return(nil)
	if podAlive {
		r.opener.EXPECT().Open(testNetns).Return(r.pod, nil)
		r.pod.EXPECT().Close().Return(nil)
		// A DEL reads the peer of its container interface first: its
		// proof of ownership for ipamd (ifindex 7, the host veth).
		r.pod.EXPECT().LinkByName("eth0").Return(kernel.Link{Index: 2, Name: "eth0", Kind: kernel.KindVeth, ParentIndex: 7}, nil).AnyTimes()
	} else {
		r.opener.EXPECT().Open(testNetns).Return(nil, kernel.ErrNamespaceGone)
	}
}

func netconf(t *testing.T, extra map[string]any) []byte {
	// Each test its own records: one test's ADD must not be another's
	// DEL source.
	c := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "ipamdTimeout": "200ms", "stateDir": t.TempDir()}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c1", Netns: testNetns, IfName: "eth0", Args: testArgs, StdinData: stdin}
}

// refPrevResult is a result as the plugin (and the reference) writes it for
// a pod on device 1 (table 2).
func refPrevResult(hostVeth, mac, dummyMac, dummySandbox string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"interfaces": []map[string]any{
			{"name": hostVeth},
			{"name": "eth0", "sandbox": testNetns, "mac": mac},
			{"name": "dummy0761ccbeace", "mac": dummyMac, "sandbox": dummySandbox},
		},
		"ips": []map[string]any{{"interface": 1, "address": "10.0.2.11/32"}},
	}
}

// emptyInventory is vpccni's ipamd holding nothing for the sandbox (the
// tests' DelNetwork mocks answer for the release).
func emptyInventory(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
	return listingInventory{}, nil, nopCloser{}, nil
}

// referenceInventory is a reference ipamd's answer to vpccni's Inventory
// service: it has none (Unimplemented). A DEL then cannot ask what its
// sandbox holds before releasing.
func referenceInventory(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
	return unimplementedInventory{}, nil, nopCloser{}, nil
}

type unimplementedInventory struct{ rpc.InventoryClient }

func (unimplementedInventory) ListAllocations(context.Context, *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	return nil, status.Error(codes.Unimplemented, "unknown service vpccni.Inventory")
}

// inFormat tags a result with the resultFormat it is to be read in, as
// LoadNetConf tags a prevResult with the netconf's.
func inFormat(format string, r types.Result) *formattedResult {
	return &formattedResult{result: r, format: format}
}

// leftVeth is p as a DEL's first teardown is given it when it hands the
// veth pair to vpccni's ipamd.
func leftVeth(p driver.Pod) driver.Pod {
	p.LeaveVeth = true
	return p
}
