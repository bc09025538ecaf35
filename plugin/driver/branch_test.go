package driver

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
)

var (
	branchIP  = netip.MustParseAddr("10.1.0.21")
	branchMAC = net.HardwareAddr{0x0a, 0xbb, 0, 0, 0, 7}
)

func branch(strict bool) *Branch {
	return &Branch{VlanID: 7, ENIMAC: branchMAC, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: 4, Strict: strict}
}

// expectVlan: the common part of both modes — stale iif rules of the host
// veth go, vlan.eth.7 is recreated on the trunk, table 107 gets the gateway.
func expectVlan(host *mock_kernel.MockAPI) []*gomock.Call {
	stale := kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: hv, Table: 105}
	return []*gomock.Call{
		host.EXPECT().RuleList(kernel.FamilyV4).Return([]kernel.Rule{stale,
			{Priority: 10, Family: kernel.FamilyV4, IifName: "other", Table: 105}}, nil),
		host.EXPECT().RuleDel(stale).Return(nil),
		host.EXPECT().LinkDel("vlan.eth.7").Return(syscall.ENODEV),
		host.EXPECT().AddVlan(kernel.VlanSpec{Name: "vlan.eth.7", ParentIndex: 4, VlanID: 7, HardwareAddr: branchMAC}).Return(nil),
		host.EXPECT().SysctlSet(gomock.Any(), gomock.Any()).Return(nil).Times(3),
		host.EXPECT().LinkSetUp("vlan.eth.7").Return(nil),
		host.EXPECT().LinkByName("vlan.eth.7").Return(kernel.Link{Index: 9, Name: "vlan.eth.7", Kind: kernel.KindVlan}, nil),
		host.EXPECT().RouteReplace(kernel.Route{Table: 107, Dst: cidr("10.1.0.1/32"), LinkIndex: 9, Scope: kernel.ScopeLink}).Return(nil),
		host.EXPECT().RouteReplace(kernel.Route{Table: 107, Gw: net.ParseIP("10.1.0.1").To4(), LinkIndex: 9, Family: kernel.FamilyV4}).Return(nil),
	}
}

func TestSetupBranchStrict(t *testing.T) {
	host, _, d := rig(t)
	calls := append(expectVlan(host),
		host.EXPECT().RouteReplace(kernel.Route{Table: 107, Dst: cidr("10.1.0.21/32"), LinkIndex: 7, Scope: kernel.ScopeLink}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan.eth.7", Table: 107}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: hv, Table: 107}).Return(nil),
	)
	gomock.InOrder(calls...)
	if err := d.setupBranchHost(host, hv, 7, PodIP{Addr: branchIP, Table: 107}, branch(true)); err != nil {
		t.Fatal(err)
	}
}

func TestSetupBranchStandard(t *testing.T) {
	host, _, d := rig(t)
	calls := append(expectVlan(host),
		host.EXPECT().RuleList(kernel.FamilyV4).Return(nil, nil),
		host.EXPECT().RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: cidr("10.1.0.21/32"), LinkIndex: 7, Scope: kernel.ScopeLink}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.1.0.21/32"), Table: kernel.TableMain}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.1.0.21/32"), Table: 107}).Return(nil),
	)
	gomock.InOrder(calls...)
	if err := d.setupBranchHost(host, hv, 7, PodIP{Addr: branchIP, Table: 107}, branch(false)); err != nil {
		t.Fatal(err)
	}
}

// TestTeardownBranchBothModes: whatever mode the pod was made in, the VLAN
// link, the iif rules of its table and its 512/1536 rules go; rules of
// other VLANs and other addresses stay.
func TestTeardownBranchBothModes(t *testing.T) {
	host, _, d := rig(t)
	mine := []kernel.Rule{
		{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan.eth.7", Table: 107},
		{Priority: 10, Family: kernel.FamilyV4, IifName: hv, Table: 107},
	}
	others := []kernel.Rule{
		{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan.eth.8", Table: 108},
		{Priority: 10, Family: kernel.FamilyV4, IifName: "x", Table: kernel.TableLocal},
	}
	r512 := kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.1.0.21/32"), Table: kernel.TableMain}
	r1536 := kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.1.0.21/32"), Table: 107}
	all := append(append(append([]kernel.Rule{}, mine...), others...), r512, r1536)
	host.EXPECT().RouteList(kernel.FamilyV4, kernel.TableMain).Return(nil, nil)
	host.EXPECT().RouteList(kernel.FamilyV4, 107).Return(nil, nil)
	// Who else uses VLAN 7: nobody (no link, no route, no rule of another pod).
	host.EXPECT().LinkList().Return(nil, nil)
	host.EXPECT().RouteList(kernel.FamilyAll, 107).Return(nil, nil)
	host.EXPECT().RouteList(kernel.FamilyAll, kernel.TableMain).Return(nil, nil)
	host.EXPECT().RuleList(kernel.FamilyAll).Return(all, nil)
	host.EXPECT().LinkDel("vlan.eth.7").Return(nil)
	host.EXPECT().RuleList(kernel.FamilyV4).Return(all, nil).Times(3)
	for _, r := range append(mine, r512, r1536) {
		host.EXPECT().RuleDel(r).Return(nil)
	}
	rep, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: &Branch{VlanID: 7}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 5 {
		t.Fatalf("removed %v", rep.Removed)
	}
}

// TestTeardownBranchNewHolder: the address is routed (in the VLAN table)
// to another pod's veth, so its VLAN and rules are left alone (#1374).
func TestTeardownBranchNewHolder(t *testing.T) {
	host, _, d := rig(t)
	host.EXPECT().RouteList(kernel.FamilyV4, kernel.TableMain).Return(nil, nil)
	host.EXPECT().RouteList(kernel.FamilyV4, 107).Return([]kernel.Route{{Table: 107, Dst: cidr("10.1.0.21/32"), LinkIndex: 12}}, nil)
	rep, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: &Branch{VlanID: 7}})
	if err != nil || len(rep.Skipped) != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
}

func TestValidVlan(t *testing.T) {
	for id, want := range map[int]bool{0: false, 1: true, 153: false, 155: false, 4094: true, 4095: false} {
		if validVlan(id) != want {
			t.Errorf("validVlan(%d) = %v", id, !want)
		}
	}
}
