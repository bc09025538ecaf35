package driver

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// TestStaleBranchTeardownSparesTheVLANsNewPod: VLAN 7 now serves another
// pod (the branch ENI moved on); a teardown from a stale result naming
// VLAN 7 with the old address removes nothing of the new pod's, in both
// modes.
func TestStaleBranchTeardownSparesTheVLANsNewPod(t *testing.T) {
	for _, strict := range []bool{true, false} {
		k := model.New()
		k.AddNamespace("node")
		k.AddNamespace("pod")
		host, _ := k.Open("node")
		pod, _ := k.Open("pod")
		trunk, _ := k.AddDevice("node", "eth2", 9001, nil)
		host.LinkSetUp("eth2")
		b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: trunk, Strict: strict}
		live := Pod{HostVeth: "vlan00000000abc", ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: netip.MustParseAddr("10.1.0.22"), Table: 107}}, Branch: b}
		d := New(nil)
		if err := d.Setup(host, pod, live); err != nil {
			t.Fatal(err)
		}
		before, _ := kernel.Snapshot(host)
		stale := Pod{HostVeth: "vlan00000000def", ContainerIf: "eth0", IPs: []PodIP{{Addr: netip.MustParseAddr("10.1.0.21"), Table: 107}}, Branch: &Branch{VlanID: 7}}
		rep, err := d.Teardown(host, nil, stale)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := kernel.Snapshot(host)
		if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
			t.Fatalf("strict=%v: the live pod lost %v (gained %v); report %+v", strict, removed, added, rep)
		}
		// Nothing ties the old address to VLAN 7 any more: nothing of it
		// is left, which the report says.
		if len(rep.Skipped)+len(rep.Notes) == 0 {
			t.Fatalf("strict=%v: the skip is not reported", strict)
		}
		if err := d.Check(host, pod, live); err != nil {
			t.Fatalf("strict=%v: the live pod is broken: %v", strict, err)
		}
	}
}
