package driver

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// On the kernel model: a branch pod of each mode is set up, read back by
// Inspect (the source of last resort) and torn down to nothing.
func TestBranchRoundTripOnModel(t *testing.T) {
	for _, strict := range []bool{true, false} {
		k := model.New()
		k.AddNamespace("node")
		k.AddNamespace("pod")
		host, _ := k.Open("node")
		pod, _ := k.Open("pod")
		trunk, err := k.AddDevice("node", "eth2", 9001, nil)
		if err != nil {
			t.Fatal(err)
		}
		host.LinkSetUp("eth2")
		before, _ := kernel.Snapshot(host)
		b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: trunk, Strict: strict}
		p := Pod{HostVeth: "vlanabc", ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: branchIP, Table: 107}}, Branch: b}
		d := New(nil)
		if err := d.Setup(host, pod, p); err != nil {
			t.Fatal(err)
		}
		got, err := d.Inspect(host, pod, "eth0")
		if err != nil || got == nil || got.Branch == nil || got.Branch.VlanID != 7 || got.IPs[0].Table != 107 || got.HostVeth != "vlanabc" {
			t.Fatalf("strict=%v: inspect %+v %v", strict, got, err)
		}
		if _, err := d.Teardown(host, pod, *got); err != nil {
			t.Fatal(err)
		}
		after, _ := kernel.Snapshot(host)
		if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
			t.Fatalf("strict=%v: left %v, lost %v", strict, added, removed)
		}
	}
}
