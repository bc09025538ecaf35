package driver

import (
	"errors"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel/model"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
)

// bhv is a strict branch pod's host veth: "vlan" and the pod's hash.
const bhv = "vlan0761ccbeace"

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
	stale := kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: bhv, Table: 105}
	return []*gomock.Call{
		host.EXPECT().RuleList(kernel.FamilyV4).Return([]kernel.Rule{stale,
			{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan0000000000a", Table: 105}}, nil),
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
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 10, Family: kernel.FamilyV4, IifName: bhv, Table: 107}).Return(nil),
	)
	gomock.InOrder(calls...)
	if err := d.setupBranchHost(host, bhv, 7, PodIP{Addr: branchIP, Table: 107}, branch(true)); err != nil {
		t.Fatal(err)
	}
}

func TestSetupBranchStandard(t *testing.T) {
	host, _, d := rig(t)
	calls := append(expectVlan(host),
		host.EXPECT().RuleList(kernel.FamilyV4).Return(nil, nil),
		host.EXPECT().RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: cidr("10.1.0.21/32"), LinkIndex: 7, Scope: kernel.ScopeLink}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.1.0.21/32"), Table: 107}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.1.0.21/32"), Table: kernel.TableMain}).Return(nil),
	)
	gomock.InOrder(calls...)
	if err := d.setupBranchHost(host, bhv, 7, PodIP{Addr: branchIP, Table: 107}, branch(false)); err != nil {
		t.Fatal(err)
	}
}

// branchModel is a model node with the test ENIs and a trunk (eth2), and
// a pod namespace.
func branchModel(t *testing.T) (host, pod kernel.API, trunk int) {
	t.Helper()
	k := model.New()
	k.AddNamespace("node")
	k.AddNamespace("pod")
	host, _ = k.Open("node")
	pod, _ = k.Open("pod")
	plugENIs(t, k, "node", host)
	trunk, err := k.AddDevice("node", "eth2", 9001, nil)
	if err != nil {
		t.Fatal(err)
	}
	host.LinkSetUp("eth2")
	return host, pod, trunk
}

// TestTeardownBranchBothModes: whatever mode the pod was made in, the VLAN
// link, the iif rules of its table and its 512/1536 rules go, with the pod
// namespace gone (only the node side left); rules of other VLANs, other
// addresses and other links stay.
func TestTeardownBranchBothModes(t *testing.T) {
	host, pod, trunk := branchModel(t)
	b := branch(true)
	b.ParentIndex = trunk
	p := Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: b}
	others := []kernel.Rule{
		{Priority: 10, Family: kernel.FamilyV4, IifName: "vlan.eth.8", Table: 108},
		{Priority: 10, Family: kernel.FamilyV4, IifName: "x", Table: kernel.TableLocal},
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.1.0.22/32"), Table: 107},
	}
	before, _ := kernel.Snapshot(host)
	for _, r := range others {
		must(t, host.RuleAdd(r))
	}
	afterOthers, _ := kernel.Snapshot(host)
	d := New(nil)
	must(t, d.Setup(host, pod, p))
	// The standard mode's rules too, as if the pod had been made under it.
	must(t, host.RuleAdd(ownership.ToPodRule(branchIP)))
	must(t, host.RuleAdd(ownership.FromPodRule(branchIP, 107)))
	must(t, pod.LinkDel("eth0")) // the runtime removed the namespace
	rep, err := d.Teardown(host, nil, Pod{HostVeth: bhv, ContainerIf: "eth0", IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: &Branch{VlanID: 7}})
	if err != nil {
		t.Fatal(err)
	}
	now, _ := kernel.Snapshot(host)
	if added, removed := kernel.Diff(afterOthers, now); len(added)+len(removed) != 0 {
		t.Fatalf("left %v, lost %v (removed %v)", added, removed, rep.Removed)
	}
	if added, _ := kernel.Diff(before, now); len(added) != len(others) {
		t.Fatalf("foreign rules lost: %v", added)
	}
}

// TestTeardownBranchNewHolder: the address is routed (in the VLAN table)
// to another pod's veth, so its VLAN and rules are left alone (#1374).
func TestTeardownBranchNewHolder(t *testing.T) {
	host, _, d := rig(t)
	expectTeardownNode(host, kernel.FamilyV4, nil)
	newHolder := []kernel.Route{{Table: 107, Dst: cidr("10.1.0.21/32"), LinkIndex: 12}}
	host.EXPECT().RuleList(kernel.FamilyV4).Return(nil, nil) // the tie's
	host.EXPECT().RouteList(kernel.FamilyV4, 107).Return(newHolder, nil).Times(2)
	rep, err := d.Teardown(host, nil, Pod{HostVeth: bhv, ContainerIf: "eth0", IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: &Branch{VlanID: 7}})
	if err != nil || len(rep.Skipped) != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
}

// TestTeardownBranchRefusesUntiedAddress: a source naming VLAN 5 and an
// address nothing on the node ties to table 105 (a forged prevResult aimed
// at foreign rules of that address) is refused and nothing is touched.
func TestTeardownBranchRefusesUntiedAddress(t *testing.T) {
	host, _, _ := branchModel(t)
	foreign := []kernel.Rule{
		{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.99.0.5/32"), Table: kernel.TableMain},
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.99.0.5/32"), Table: 100},
	}
	for _, r := range foreign {
		must(t, host.RuleAdd(r))
	}
	before, _ := kernel.Snapshot(host)
	_, err := New(nil).Teardown(host, nil, Pod{HostVeth: bhv, ContainerIf: "eth0",
		IPs: []PodIP{{Addr: netip.MustParseAddr("10.99.0.5"), Table: 105}}, Branch: &Branch{VlanID: 5}})
	var notPod *NotPodAddressError
	if !errors.As(err, &notPod) {
		t.Fatalf("err = %v, want a NotPodAddressError", err)
	}
	after, _ := kernel.Snapshot(host)
	if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
		t.Fatalf("a refused teardown changed the node: +%v -%v", added, removed)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestValidVlan(t *testing.T) {
	for id, want := range map[int]bool{0: false, 1: true, 153: false, 155: false, 4094: true, 4095: false} {
		if ownership.ValidVlan(id) != want {
			t.Errorf("ownership.ValidVlan(%d) = %v", id, !want)
		}
	}
}
