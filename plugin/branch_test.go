package plugin

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/driver"
)

func branchReply(vlan int32) *rpc.AddNetworkReply {
	return &rpc.AddNetworkReply{Success: true, PodVlanId: vlan, PodENIMAC: "0a:bb:00:00:00:07", PodENISubnetGW: "10.1.0.1", ParentIfIndex: 4,
		IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.1.0.21", DeviceNumber: -1}}}
}

// TestAddBranchENI: a branch pod is built on its VLAN's table with the
// mode's host veth name, and its result carries the VLAN in the dummy.
func TestAddBranchENI(t *testing.T) {
	for _, mode := range []string{ModeStrict, ModeStandard} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(true)
			r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(branchReply(7), nil)
			want := driver.Pod{HostVeth: "vlan0761ccbeace", ContainerIf: "eth0", MTU: DefaultMTU, MACSeed: "c1",
				IPs: []driver.PodIP{{Addr: netip.MustParseAddr("10.1.0.21"), Table: 107}},
				Branch: &driver.Branch{VlanID: 7, ENIMAC: net.HardwareAddr{0x0a, 0xbb, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"),
					ParentIndex: 4, Strict: mode == ModeStrict}}
			if mode == ModeStandard {
				want.HostVeth = testHostVeth
			}
			r.drv.EXPECT().Setup(r.host, r.pod, want).Return(nil)
			res, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"podSGEnforcingMode": mode})))
			if err != nil {
				t.Fatal(err)
			}
			st, err := decodeCleanupState(inFormat(ResultFormatReference, res), "eth0", "default", "web-1", "eni")
			if err != nil {
				t.Fatal(err)
			}
			if st.VlanID != 7 || st.Pod.Branch == nil || st.Pod.IPs[0].Table != 107 || st.Pod.HostVeth != want.HostVeth {
				t.Fatalf("round trip %+v", st)
			}
		})
	}
}

func TestAddBranchENIRejectsBadReply(t *testing.T) {
	for name, reply := range map[string]*rpc.AddNetworkReply{
		"vlan 4095": branchReply(4095), "vlan 153 (table default)": branchReply(153),
		"no trunk": func() *rpc.AddNetworkReply { r := branchReply(7); r.ParentIfIndex = 0; return r }(),
		"bad mac":  func() *rpc.AddNetworkReply { r := branchReply(7); r.PodENIMAC = "zz"; return r }(),
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.expectHandles(true)
			r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(reply, nil)
			r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(okDelReply, nil)
			_, err := r.p.Add(cmdArgs(netconf(t, nil)))
			wantCode(t, err, ErrIpamd)
		})
	}
}

// TestDelBranchFromPrevResult: the VLAN comes from the dummy, teardown
// runs before ipamd is told, and ipamd's absence changes nothing.
func TestDelBranchFromPrevResult(t *testing.T) {
	r := newRig(t)
	r.expectHandles(false)
	prev := refPrevResult("vlan0761ccbeace", "107", "7", "")
	prev["ips"] = []map[string]any{{"interface": 1, "address": "10.1.0.21/32", "gateway": "10.1.0.1"}}
	want := driver.Pod{HostVeth: "vlan0761ccbeace", ContainerIf: "eth0", IPs: []driver.PodIP{{Addr: netip.MustParseAddr("10.1.0.21"), Table: 107}},
		Branch: &driver.Branch{VlanID: 7}}
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, nil, want).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(ipamdUnreachable),
	)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": prev}))); err != nil {
		t.Fatal(err)
	}
	// A table that disagrees with the VLAN is a forged state: it is set
	// aside, the DEL goes on from what ipamd and the namespace prove, and
	// fails with code 7 naming it...
	r2 := newRig(t)
	r2.expectHandles(false)
	r2.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(okDelReply, nil)
	r2.drv.EXPECT().Teardown(r2.host, nil, gomock.Any()).Return(driver.Report{}, nil) // what ipamd's reply names
	bad := refPrevResult("vlan0761ccbeace", "2", "7", "")
	err := r2.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": bad})))
	wantCode(t, err, 7)
	if !strings.Contains(err.Error(), "VLAN 7 and route table") {
		t.Fatalf("the error does not say what is wrong: %v", err)
	}
	// ...until a DEL finds nothing left to do (nothing on the node,
	// nothing held by ipamd): it succeeds, or the runtime would keep the
	// sandbox, and libcni's GC stop at it, for ever.
	r3 := newRig(t)
	r3.expectHandles(false)
	r3.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(ipamdUnknownPod)
	if err := r3.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": bad}))); err != nil {
		t.Fatalf("a DEL with nothing left to do failed: %v", err)
	}
}

// TestDelBranchFromReply: without prevResult, ipamd's PodVlanId selects
// the branch teardown.
func TestDelBranchFromReply(t *testing.T) {
	r := newRig(t)
	r.expectHandles(false)
	r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(&rpc.DelNetworkReply{Success: true, PodVlanId: 7,
		IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.1.0.21"}}}, nil)
	r.drv.EXPECT().Teardown(r.host, nil, driver.Pod{HostVeth: testHostVeth, ContainerIf: "eth0",
		IPs: []driver.PodIP{{Addr: netip.MustParseAddr("10.1.0.21"), Table: 107}}, Branch: &driver.Branch{VlanID: 7}}).Return(driver.Report{}, nil)
	if err := r.p.Del(cmdArgs(netconf(t, nil))); err != nil {
		t.Fatal(err)
	}
}
