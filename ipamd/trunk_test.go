package ipamd

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// nodeLinks is a node namespace with a trunk ENI (index 4) and a VLAN on
// it that kept the trunk's MAC.
var nodeLinks = []kernel.Link{
	{Index: 1, Name: "lo", Kind: kernel.KindLoopback, HardwareAddr: make(net.HardwareAddr, 6)},
	{Index: 2, Name: "eth0", Kind: "ena", HardwareAddr: mac("02:00:00:00:00:01")},
	{Index: 3, Name: "vlan.eth.7", Kind: kernel.KindVlan, ParentIndex: 4, VlanID: 7, HardwareAddr: mac("02:00:00:00:02:01")},
	{Index: 4, Name: "eth2", Kind: "ena", HardwareAddr: mac("02:00:00:00:02:01")},
}

func linkAPI(t *testing.T, links []kernel.Link, err error) kernel.API {
	api := mock_kernel.NewMockAPI(gomock.NewController(t))
	api.EXPECT().LinkList().Return(links, err).AnyTimes()
	return api
}

func TestTrunkIndexByMAC(t *testing.T) {
	api := linkAPI(t, nodeLinks, nil)
	// Any spelling net.ParseMAC accepts; VLAN links are not the trunk.
	for _, m := range []string{"02:00:00:00:02:01", "02-00-00-00-02-01", "0200.0000.0201"} {
		if idx, err := TrunkIndexByMAC(api, m); err != nil || idx != 4 {
			t.Fatalf("%s: index %d %v, want 4", m, idx, err)
		}
	}
	if _, err := TrunkIndexByMAC(api, "02:00:00:00:09:01"); err == nil ||
		!strings.Contains(err.Error(), "no link with the trunk ENI's MAC 02:00:00:00:09:01 in this network namespace") {
		t.Fatalf("absent MAC: %v", err)
	}
	if _, err := TrunkIndexByMAC(api, "not-a-mac"); err == nil || !strings.Contains(err.Error(), `"not-a-mac"`) {
		t.Fatalf("bad MAC: %v", err)
	}
	twice := append(append([]kernel.Link(nil), nodeLinks...), kernel.Link{Index: 9, Name: "eth9", Kind: "ena", HardwareAddr: mac("02:00:00:00:02:01")})
	if _, err := TrunkIndexByMAC(linkAPI(t, twice, nil), "02:00:00:00:02:01"); err == nil ||
		!strings.Contains(err.Error(), "eth2 (index 4), eth9 (index 9)") {
		t.Fatalf("two links with the MAC: %v", err)
	}
	boom := errors.New("netlink: boom")
	if _, err := TrunkIndexByMAC(linkAPI(t, nil, boom), "02:00:00:00:02:01"); !errors.Is(err, boom) {
		t.Fatalf("LinkList error: %v", err)
	}
}
