package plugin

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/attachrec"
	"github.com/vpccni/vpccni/plugin/driver"
)

type listingInventory struct {
	rpc.InventoryClient
	allocs []*rpc.Allocation
}

func (l listingInventory) ListAllocations(context.Context, *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	return &rpc.ListAllocationsReply{Allocations: l.allocs}, nil
}

// TestGCKeepsAnAddressRoutedToAnotherPod: a stale attachment whose
// address the kernel routes to another pod's veth is not released (its
// rules are left too, by the driver's ownership check): GC fails for it
// with code 11, and ipamd is never told to free it.
func TestGCKeepsAnAddressRoutedToAnotherPod(t *testing.T) {
	r := newRig(t)
	stale := &rpc.Allocation{ContainerId: "gone", IfName: "eth0", NetworkName: "aws-cni", Ip: "10.0.1.15", RouteTable: 254,
		PodNamespace: "default", PodName: "web-1"}
	r.p.env.DialInventory = func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		return listingInventory{allocs: []*rpc.Allocation{stale}}, nil, nopCloser{}, nil
	}
	r.opener.EXPECT().Open("").Return(r.host, nil)
	r.host.EXPECT().Close().Return(nil)
	r.drv.EXPECT().Teardown(r.host, nil, gomock.Any()).Return(driver.Report{Skipped: []string{"10.0.1.15/32: now routed to eni9fb0db7f13e"}}, nil)
	// No DelNetwork: the mock fails the test if one is made.
	err := r.p.GC(&skel.CmdArgs{StdinData: netconf(t, map[string]any{"cniVersion": "1.1.0"})})
	ce, ok := err.(*types.Error)
	if !ok || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Details, "10.0.1.15 not released: 10.0.1.15/32: now routed to eni9fb0db7f13e") {
		t.Fatalf("GC: %v", err)
	}
}

// TestStatusLogsNotReady: a STATUS that fails says so in the plugin's
// log (runtimes poll it; the journal is not always on).
func TestStatusLogsNotReady(t *testing.T) {
	r := newRig(t)
	r.p.env.DialInventory = func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		return nil, nil, nil, errors.New("dial refused")
	}
	logFile := filepath.Join(t.TempDir(), "plugin.log")
	err := r.p.Status(&skel.CmdArgs{StdinData: netconf(t, map[string]any{"cniVersion": "1.1.0", "pluginLogFile": logFile})})
	if ce, ok := err.(*types.Error); !ok || ce.Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS: %v", err)
	}
	b, _ := os.ReadFile(logFile)
	if !strings.Contains(string(b), `"msg":"not ready"`) || !strings.Contains(string(b), `"verb":"STATUS"`) || !strings.Contains(string(b), "dial refused") {
		t.Fatalf("plugin log:\n%s", b)
	}
}

// TestGCCollectsALiveSandbox: a stale attachment whose sandbox still
// exists (the runtime lost it) is collected: GC opens the pod namespace
// ipamd recorded for the ADD, so the peer of its container interface
// proves the host veth the address is routed to is the pod's own. Every
// object of the victim goes, its address is released, and the neighbour
// keeps everything. Without the namespace the driver could not tell the
// pod's veth from another pod's and GC failed for ever (code 11).
func TestGCCollectsALiveSandbox(t *testing.T) {
	w := newHostileWorld(t, driver.New(nil), 1)
	victimNode := w.snap(t, hostileNode)
	stale := &rpc.Allocation{ContainerId: "c-" + victimName, IfName: "eth0", NetworkName: "aws-cni", Ip: w.victim.ip, RouteTable: 2,
		PodNamespace: "default", PodName: victimName, Netns: w.victim.netns}
	w.p.env.DialInventory = func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		return listingInventory{allocs: []*rpc.Allocation{stale}}, nil, nopCloser{}, nil
	}
	valid := `[{"containerID":"c-` + neighName + `","ifname":"eth0"}]`
	stdin := []byte(`{"cniVersion":"1.1.0","name":"aws-cni","type":"vpc-cni","stateDir":"` + w.stateDir + `","cni.dev/valid-attachments":` + valid + `}`)
	if err := w.p.GC(&skel.CmdArgs{StdinData: stdin}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	_, removed := kernel.Diff(victimNode, w.snap(t, hostileNode))
	if !slices.Equal(removed, w.victim.lines) {
		t.Fatalf("GC removed %q, want exactly the victim's %q", removed, w.victim.lines)
	}
	if pod := w.snap(t, w.victim.netns); len(pod.Links) > 1 {
		t.Fatalf("the victim's eth0 is still in its namespace: %v", pod.Links)
	}
	if !slices.Equal(w.ipamd.released, []string{victimName}) {
		t.Fatalf("ipamd released %q, want the victim's address only", w.ipamd.released)
	}
	// The collected attachment's record goes; the valid one's stays.
	if _, err := w.record(t); !errors.Is(err, attachrec.ErrNotFound) {
		t.Fatalf("the collected attachment's record: %v, want it removed", err)
	}
	if _, err := w.store().Load("aws-cni", "c-"+neighName, "eth0"); err != nil {
		t.Fatalf("the valid attachment's record: %v", err)
	}
}
