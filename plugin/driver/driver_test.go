package driver

import (
	"errors"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
)

const hv = "eni0761ccbeace"

var (
	ip1      = netip.MustParseAddr("10.0.2.11")
	hostMACv = net.HardwareAddr{0x02, 1, 2, 3, 4, 5}
)

func cidr(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func rig(t *testing.T) (*mock_kernel.MockAPI, *mock_kernel.MockAPI, *Driver) {
	ctrl := gomock.NewController(t)
	return mock_kernel.NewMockAPI(ctrl), mock_kernel.NewMockAPI(ctrl), New(nil)
}

// TestSetupKernelCalls pins the exact objects of an IPv4 pod on the
// primary ENI (table main: no 1536 rule) and on a secondary ENI (table 2).
func TestSetupKernelCalls(t *testing.T) {
	for _, table := range []int{kernel.TableMain, 2} {
		t.Run(ownership.TableName(table), func(t *testing.T) {
			host, pod, d := rig(t)
			p := Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: ip1, Table: table}}, MACSeed: "c1"}
			calls := []*gomock.Call{
				host.EXPECT().LinkByName(hv).Return(kernel.Link{}, syscall.ENODEV),
				pod.EXPECT().AddVeth(gomock.Any()).DoAndReturn(func(s kernel.VethSpec) error {
					if s.Name != "eth0" || s.PeerName != hv || s.MTU != 9001 || s.PeerNamespace != host || len(s.PeerHardwareAddr) != 6 || s.PeerHardwareAddr[0]&3 != 2 {
						t.Errorf("veth spec %+v", s)
					}
					return nil
				}),
				host.EXPECT().SysctlSet("net/ipv6/conf/"+hv+"/accept_ra", "0").Return(nil),
				host.EXPECT().SysctlSet("net/ipv6/conf/"+hv+"/accept_redirects", "1").Return(nil),
				host.EXPECT().SysctlSet("net/ipv6/conf/"+hv+"/forwarding", "0").Return(syscall.ENOENT),
				host.EXPECT().LinkSetUp(hv).Return(nil),
				pod.EXPECT().LinkSetUp("eth0").Return(nil),
				pod.EXPECT().LinkByName("eth0").Return(kernel.Link{Index: 2, Name: "eth0", Kind: kernel.KindVeth, ParentIndex: 7}, nil),
				host.EXPECT().LinkByName(hv).Return(kernel.Link{Index: 7, Name: hv, HardwareAddr: hostMACv}, nil),
				pod.EXPECT().RouteReplace(kernel.Route{Dst: cidr("169.254.1.1/32"), LinkIndex: 2, Scope: kernel.ScopeLink}).Return(nil),
				pod.EXPECT().RouteReplace(kernel.Route{Gw: net.IP(GatewayV4.AsSlice()), LinkIndex: 2, Family: kernel.FamilyV4}).Return(nil),
				pod.EXPECT().AddrAdd(2, cidr("10.0.2.11/32")).Return(nil),
				pod.EXPECT().NeighSet(kernel.Neigh{LinkIndex: 2, IP: net.IP(GatewayV4.AsSlice()), HardwareAddr: hostMACv, State: kernel.NeighStatePermanent}).Return(nil),
				host.EXPECT().RuleList(kernel.FamilyV4).Return(nil, nil),
				host.EXPECT().RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: cidr("10.0.2.11/32"), LinkIndex: 7, Scope: kernel.ScopeLink}).Return(nil),
			}
			if table != kernel.TableMain {
				calls = append(calls, host.EXPECT().RuleAdd(kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 2}).Return(nil))
			}
			calls = append(calls, host.EXPECT().RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}).Return(syscall.EEXIST))
			gomock.InOrder(calls...)
			if err := d.Setup(host, pod, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSetupClearsStaleFromRules: a 1536 rule for our new address in another
// pod table is an earlier holder's leftover; foreign-looking rules stay.
func TestSetupClearsStaleFromRules(t *testing.T) {
	host := mock_kernel.NewMockAPI(gomock.NewController(t))
	stale := kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 3}
	rules := []kernel.Rule{stale,
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 2},          // ours, stays
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.0/24"), Table: 3},           // not a pod selector
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 253},        // not a pod table
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 3, Mark: 1}, // has a mark
	}
	host.EXPECT().RuleList(kernel.FamilyV4).Return(rules, nil)
	host.EXPECT().RuleDel(stale).Return(nil)
	host.EXPECT().RouteReplace(gomock.Any()).Return(nil)
	host.EXPECT().RuleAdd(gomock.Any()).Return(nil).Times(2)
	if err := New(nil).setupHostSide(host, 7, PodIP{Addr: ip1, Table: 2}); err != nil {
		t.Fatal(err)
	}
}

var (
	our512  = kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}
	our1536 = kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 2}
	// Rules at our priorities that are not ours: they must survive.
	foreign = []kernel.Rule{
		{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.2.0/24"), Table: kernel.TableMain},
		{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableLocal},
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.12/32"), Table: 2},
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: kernel.TableDefault},
		{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Dst: cidr("10.9.0.0/16"), Table: 2},
		{Priority: 32766, Family: kernel.FamilyV4, Table: kernel.TableMain},
	}
	hostRt = kernel.Route{Table: kernel.TableMain, Dst: cidr("10.0.2.11/32"), LinkIndex: 7, Scope: kernel.ScopeLink}
)

func allRules() []kernel.Rule { return append([]kernel.Rule{our512, our1536}, foreign...) }

func TestTeardownOwnedIP(t *testing.T) {
	host, pod, d := rig(t)
	expectTeardownNode(host, kernel.FamilyV4, allRules(), hostRt)
	p := Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 2}}}
	pod.EXPECT().LinkByName("eth0").Return(kernel.Link{Index: 2, Kind: kernel.KindVeth, ParentIndex: 7}, nil)
	host.EXPECT().RuleDel(our512).Return(nil)
	host.EXPECT().RuleDel(our1536).Return(syscall.ENOENT) // gone meanwhile: fine
	host.EXPECT().RouteDel(hostRt).Return(nil)
	pod.EXPECT().LinkDel("eth0").Return(nil)
	rep, err := d.Teardown(host, pod, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 4 || len(rep.Skipped) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// TestTeardownNamespaceGone: no pod namespace, no host route (it went with
// the veth): the IP is still ours, its rules go.
func TestTeardownNamespaceGone(t *testing.T) {
	host, _, d := rig(t)
	expectTeardownNode(host, kernel.FamilyV4, allRules())
	host.EXPECT().RuleDel(our512).Return(nil)
	host.EXPECT().RuleDel(our1536).Return(nil)
	if _, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 2}}}); err != nil {
		t.Fatal(err)
	}
}

// TestTeardownUnknownTable: a source without the table (#2048's prevResult)
// removes the pod's 1536 rules in the table of its ENI as the node shows
// it (eth1's, 2), and leaves one of the same shape in a table no ENI of the
// address uses (5): nothing proves it is a pod's.
func TestTeardownUnknownTable(t *testing.T) {
	host, _, d := rig(t)
	other := kernel.Rule{Priority: 1536, Family: kernel.FamilyV4, Src: cidr("10.0.2.11/32"), Table: 5}
	expectTeardownNode(host, kernel.FamilyV4, append(allRules(), other))
	host.EXPECT().RuleDel(our512).Return(nil)
	host.EXPECT().RuleDel(our1536).Return(nil)
	if _, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: ownership.TableUnknown}}}); err != nil {
		t.Fatal(err)
	}
}

// TestTeardownLeavesNewHolderAlone: the IP's host route points at another
// pod's veth, so the IP has moved on: no rule or route is touched.
func TestTeardownLeavesNewHolderAlone(t *testing.T) {
	host, pod, d := rig(t)
	newHolder := hostRt
	newHolder.LinkIndex = 9
	expectTeardownNode(host, kernel.FamilyV4, allRules(), newHolder)
	pod.EXPECT().LinkByName("eth0").Return(kernel.Link{}, syscall.ENODEV)
	host.EXPECT().LinkByIndex(9).Return(kernel.Link{Index: 9, Name: "eniaaaaaaaaaaa"}, nil)
	pod.EXPECT().LinkDel("eth0").Return(syscall.ENODEV)
	rep, err := d.Teardown(host, pod, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || len(rep.Removed) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// TestTeardownFailureIsReported: a failing step is an error, and the other
// rules still go; the host route (no RouteDel: the address is still this
// veth's to the reconciler) and the pod's interface (no LinkDel: the retry
// reads the pod's addresses from it) stay.
func TestTeardownFailureIsReported(t *testing.T) {
	host, pod, d := rig(t)
	expectTeardownNode(host, kernel.FamilyV4, allRules(), hostRt)
	pod.EXPECT().LinkByName("eth0").Return(kernel.Link{Index: 2, Kind: kernel.KindVeth, ParentIndex: 7}, nil)
	host.EXPECT().RuleDel(our512).Return(syscall.EPERM)
	host.EXPECT().RuleDel(our1536).Return(nil)
	rep, err := d.Teardown(host, pod, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 2}}})
	if !errors.Is(err, syscall.EPERM) {
		t.Fatalf("err = %v, want EPERM", err)
	}
	for _, kept := range []string{"kept route 10.0.2.11/32", "kept eth0"} {
		if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, kept) }) {
			t.Errorf("notes %q do not say %q", rep.Notes, kept)
		}
	}
}

// TestTeardownRefusesForgedSource: an address that cannot be a pod's, or
// that the node does not show as one (the node's own address, one in no
// ENI's subnet), is refused while the kernel has objects for it, and
// nothing is deleted; with nothing of it on the node there is nothing to
// refuse. A table the source names is evidence only: the node's wins.
func TestTeardownRefusesForgedSource(t *testing.T) {
	foreignTo := kernel.Rule{Priority: 512, Family: kernel.FamilyV4, Dst: cidr("10.99.0.5/32"), Table: kernel.TableMain}
	for _, a := range []string{"10.99.0.5", "10.0.2.10", "10.0.1.10"} {
		host, _, d := rig(t)
		addr := netip.MustParseAddr(a)
		rule := foreignTo
		rule.Dst = cidr(a + "/32")
		expectTeardownNode(host, kernel.FamilyV4, []kernel.Rule{rule})
		_, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: addr, Table: 2}}})
		var notPod *NotPodAddressError
		if !errors.As(err, &notPod) || notPod.Addr != addr {
			t.Errorf("%s: err = %v, want a NotPodAddressError", a, err)
		}
	}
	host, _, d := rig(t)
	expectTeardownNode(host, kernel.FamilyV4, nil)
	rep, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: netip.MustParseAddr("10.99.0.5"), Table: 2}}})
	if err != nil || len(rep.Notes) != 1 || len(rep.Removed) != 0 {
		t.Errorf("nothing of a non-pod address on the node: %+v %v, want a note and no error", rep, err)
	}

	host, _, d = rig(t)
	expectTeardownNode(host, kernel.FamilyV4, allRules())
	host.EXPECT().RuleDel(our512).Return(nil)
	host.EXPECT().RuleDel(our1536).Return(nil)
	rep, err = d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 100}}})
	if err != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "the node says 2") {
		t.Errorf("a wrong table in the source: %+v %v, want the node's table torn down and a note", rep, err)
	}
}

func TestIsPodTable(t *testing.T) {
	for tbl, want := range map[int]bool{0: false, 1: false, 2: true, 101: true, 252: true, 253: false, 254: true, 255: false, 256: true, 10001: true, 70000: false} {
		if ownership.IsPodTable(tbl) != want {
			t.Errorf("ownership.IsPodTable(%d) = %v", tbl, !want)
		}
	}
}
