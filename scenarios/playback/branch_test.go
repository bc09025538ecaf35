package playback

import (
	"context"
	"fmt"
	"testing"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// branchIpamd gives every pod a branch ENI on the trunk eth1 (ifindex 3,
// as on an instance: lo 1, eth0 2), VLAN 1, 2, …
type branchIpamd struct {
	*poolIpamd
	vlans int
}

func (b *branchIpamd) AddNetwork(ctx context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	b.vlans++
	ip := fmt.Sprintf("192.168.5.%d", 10+b.vlans)
	md := &rpc.IPAllocationMetadata{IPv4Addr: ip, DeviceNumber: -1}
	b.held[in.ContainerID] = md
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}, PodVlanId: int32(b.vlans),
		PodENIMAC: fmt.Sprintf("0a:1b:2c:3d:4e:%02x", b.vlans), PodENISubnetGW: "192.168.5.1", ParentIfIndex: 3}, nil
}

// TestPlaybackBranchPods: branch-ENI pods in both enforcing modes replay
// to the recording's objects (VLAN links on the trunk stand-in, tables
// vlan+100, iif rules or rules 512/1536), and their DELs leave nothing.
func TestPlaybackBranchPods(t *testing.T) {
	for _, mode := range []string{"strict", "standard"} {
		t.Run(mode, func(t *testing.T) {
			r := newRecording(t) // eth1 (ifindex 3) is the trunk
			r.extra = map[string]any{"podSGEnforcingMode": mode}
			r.setBackend(&branchIpamd{poolIpamd: r.ipamd})
			r.add("sgp-0")
			r.add("sgp-1")
			r.stopp("sgp-0")
			rep := r.replaysFaithfully()
			if !contains(rep.Left[NodeNS], "link vlan.eth.2 vlan up mtu 9001 vlan 2 parent eth1") {
				t.Fatalf("sgp-1's VLAN link: %v", rep.Left[NodeNS])
			}
		})
	}
}

// v6Ipamd hands out /128s of a delegated prefix on device 0 (IPv6 mode).
type v6Ipamd struct {
	*poolIpamd
	n int
}

func (v *v6Ipamd) AddNetwork(_ context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	v.n++
	md := &rpc.IPAllocationMetadata{IPv6Addr: fmt.Sprintf("2001:db8:1:2::%x", 0x10+v.n), RouteTableId: 254}
	v.held[in.ContainerID] = md
	return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{md}}, nil
}

// TestPlaybackIPv6Pods: IPv6 pods (fe80::1 gateway, /128, DAD) replay to
// the recording's objects, and a DEL while ipamd is down leaves nothing.
func TestPlaybackIPv6Pods(t *testing.T) {
	r := newRecording(t)
	r.setBackend(&v6Ipamd{poolIpamd: r.ipamd})
	r.add("v6-0")
	r.add("v6-1")
	r.ipamd.down = true
	r.stopp("v6-0")
	rep := r.replaysFaithfully()
	if !contains(rep.Left[NodeNS], "rule 512: inet6 from all to 2001:db8:1:2::12 lookup main") {
		t.Fatalf("v6-1's rule: %v", rep.Left[NodeNS])
	}
}
