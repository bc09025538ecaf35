package driver

import (
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
)

var ip6 = netip.MustParseAddr("2600:1f14:a:1::1")

// TestSetupIPv6KernelCalls pins an IPv6 pod (docs/reference-facts.md#ipv6-pod): IPv6
// enabled on eth0 and lo, gateway fe80::1 with its /128 link route and
// permanent neighbour, the /128 address, the wait for DAD, and on the node
// the /128 host route and rule 512 of the IPv6 family (no 1536: main).
func TestSetupIPv6KernelCalls(t *testing.T) {
	host, pod, d := rig(t)
	gw := net.ParseIP("fe80::1")
	tentative := []kernel.Addr{{LinkIndex: 2, IPNet: cidr("2600:1f14:a:1::1/128"), Flags: kernel.AddrFlagTentative}}
	gomock.InOrder(
		host.EXPECT().LinkByName(hv).Return(kernel.Link{}, syscall.ENODEV),
		pod.EXPECT().AddVeth(gomock.Any()).Return(nil),
		host.EXPECT().SysctlSet(gomock.Any(), gomock.Any()).Return(nil).Times(3),
		host.EXPECT().LinkSetUp(hv).Return(nil),
		pod.EXPECT().LinkSetUp("eth0").Return(nil),
		pod.EXPECT().LinkByName("eth0").Return(kernel.Link{Index: 2, Name: "eth0", Kind: kernel.KindVeth, ParentIndex: 7}, nil),
		host.EXPECT().LinkByName(hv).Return(kernel.Link{Index: 7, Name: hv, HardwareAddr: hostMACv}, nil),
		pod.EXPECT().LinkByIndex(2).Return(kernel.Link{Index: 2, Name: "eth0"}, nil),
		pod.EXPECT().SysctlSet("net/ipv6/conf/eth0/disable_ipv6", "0").Return(nil),
		pod.EXPECT().SysctlSet("net/ipv6/conf/lo/disable_ipv6", "0").Return(nil),
		pod.EXPECT().RouteReplace(kernel.Route{Dst: cidr("fe80::1/128"), LinkIndex: 2, Scope: kernel.ScopeLink}).Return(nil),
		pod.EXPECT().RouteReplace(kernel.Route{Gw: gw, LinkIndex: 2, Family: kernel.FamilyV6}).Return(nil),
		pod.EXPECT().AddrAdd(2, cidr("2600:1f14:a:1::1/128")).Return(nil),
		pod.EXPECT().NeighSet(kernel.Neigh{LinkIndex: 2, IP: gw, HardwareAddr: hostMACv, State: kernel.NeighStatePermanent}).Return(nil),
		pod.EXPECT().AddrList(2, kernel.FamilyV6).Return(tentative, nil),
		pod.EXPECT().AddrList(2, kernel.FamilyV6).Return([]kernel.Addr{{LinkIndex: 2, IPNet: cidr("2600:1f14:a:1::1/128")}}, nil),
		host.EXPECT().RuleList(kernel.FamilyV6).Return(nil, nil),
		host.EXPECT().RouteReplace(kernel.Route{Table: kernel.TableMain, Dst: cidr("2600:1f14:a:1::1/128"), LinkIndex: 7, Scope: kernel.ScopeLink}).Return(nil),
		host.EXPECT().RuleAdd(kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Dst: cidr("2600:1f14:a:1::1/128"), Table: kernel.TableMain}).Return(nil),
	)
	p := Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: ip6, Table: kernel.TableMain}}}
	if err := d.Setup(host, pod, p); err != nil {
		t.Fatal(err)
	}
}

func TestWaitDADFailsAndTimesOut(t *testing.T) {
	_, pod, d := rig(t)
	pod.EXPECT().AddrList(2, kernel.FamilyV6).Return([]kernel.Addr{{IPNet: cidr("2600::1/128"), Flags: kernel.AddrFlagDadFailed}}, nil)
	if err := d.waitDAD(pod, 2); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("dadfailed: %v", err)
	}
	pod.EXPECT().AddrList(2, kernel.FamilyV6).Return([]kernel.Addr{{IPNet: cidr("2600::1/128"), Flags: kernel.AddrFlagTentative}}, nil).AnyTimes()
	if err := d.WithDADTimeout(120*time.Millisecond).waitDAD(pod, 2); err == nil || !strings.Contains(err.Error(), "tentative") {
		t.Fatalf("timeout: %v", err)
	}
}

// TestTeardownIPv6: the same ownership rules, in the IPv6 family.
func TestTeardownIPv6(t *testing.T) {
	host, _, d := rig(t)
	r512 := kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Dst: cidr("2600:1f14:a:1::1/128"), Table: kernel.TableMain}
	other := kernel.Rule{Priority: 512, Family: kernel.FamilyV6, Dst: cidr("2600:1f14:a:1::2/128"), Table: kernel.TableMain}
	expectTeardownNode(host, kernel.FamilyV6, []kernel.Rule{r512, other})
	host.EXPECT().RuleDel(r512).Return(nil)
	if _, err := d.Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip6, Table: kernel.TableMain}}}); err != nil {
		t.Fatal(err)
	}
}
