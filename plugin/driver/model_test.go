package driver

import (
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// On the kernel model: a branch pod of each mode and family (IPv6 with the
// branch gateway fe80:ec2::1) is set up, read back by
// Inspect (the source of last resort) and torn down to nothing.
func TestBranchRoundTripOnModel(t *testing.T) {
	for _, c := range []struct {
		strict bool
		ip, gw string
	}{{true, "10.1.0.21", "10.1.0.1"}, {false, "10.1.0.21", "10.1.0.1"},
		{true, "2600:1f14:b::5", "fe80:ec2::1"}, {false, "2600:1f14:b::5", "fe80:ec2::1"}} {
		strict := c.strict
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
		b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr(c.gw), ParentIndex: trunk, Strict: strict}
		p := Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: netip.MustParseAddr(c.ip), Table: 107}}, Branch: b}
		d := New(nil)
		if err := d.Setup(host, pod, p); err != nil {
			t.Fatal(err)
		}
		if err := d.Check(host, pod, p); err != nil {
			t.Fatalf("strict=%v %s: check after setup: %v", strict, c.ip, err)
		}
		got, err := d.Inspect(host, pod, "eth0")
		if err != nil || got == nil || got.Branch == nil || got.Branch.VlanID != 7 || got.IPs[0].Table != 107 || got.HostVeth != bhv {
			t.Fatalf("strict=%v %s: inspect %+v %v", strict, c.ip, got, err)
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

// TestCheckNamesWhatIsMissing: CHECK passes on a fresh pod and names the
// object that went missing.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	k := model.New()
	k.AddNamespace("node")
	k.AddNamespace("pod")
	host, _ := k.Open("node")
	pod, _ := k.Open("pod")
	p := Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: ip1, Table: 2}}}
	d := New(nil)
	if err := d.Setup(host, pod, p); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(host, pod, p); err != nil {
		t.Fatalf("fresh pod: %v", err)
	}
	if err := host.RuleDel(kernel.Rule{Priority: ownership.PrioFromPod, Src: cidr("10.0.2.11/32"), Table: 2}); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(host, pod, p); err == nil || !strings.Contains(err.Error(), "rule 1536 from 10.0.2.11/32 lookup 2 is missing") {
		t.Fatalf("check: %v", err)
	}
	if err := pod.LinkDel("eth0"); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(host, pod, p); err == nil || !strings.Contains(err.Error(), "eth0 is missing") {
		t.Fatalf("check without the pod link: %v", err)
	}
}

// TestInspectAfterBranchTeardownCutShort: a standard-mode branch teardown
// stopped after the VLAN link went (with its table) and before rule 1536
// did leaves the pod's interface and that lone rule; Inspect still reads
// a branch pod from them (its address lies in no ENI subnet), and the
// retry's teardown removes the rest.
func TestInspectAfterBranchTeardownCutShort(t *testing.T) {
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
	b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: trunk}
	a := netip.MustParseAddr("10.1.0.21")
	p := Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: a, Table: 107}}, Branch: b}
	d := New(nil)
	if err := d.Setup(host, pod, p); err != nil {
		t.Fatal(err)
	}
	// What the first attempt got done: everything but rule 1536 and the
	// pod's interface.
	if err := host.LinkDel(b.VlanLink()); err != nil {
		t.Fatal(err)
	}
	if _, err := deleteRules(host, nil, toPodRuleMatcher(a)); err != nil {
		t.Fatal(err)
	}
	if r, err := routeIn(host, ownership.HostPrefix(a), kernel.TableMain); err != nil || r == nil {
		t.Fatalf("main route: %v %v", r, err)
	} else if err := host.RouteDel(*r); err != nil {
		t.Fatal(err)
	}
	got, err := d.Inspect(host, pod, "eth0")
	if err != nil || got == nil || got.Branch == nil || got.Branch.VlanID != 7 || got.IPs[0].Table != 107 {
		t.Fatalf("inspect after the cut-short teardown: %+v %v", got, err)
	}
	if _, err := d.Teardown(host, pod, *got); err != nil {
		t.Fatal(err)
	}
	after, _ := kernel.Snapshot(host)
	if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
		t.Fatalf("left %v, lost %v", added, removed)
	}
}

// TestInspectBranchBeforeItsRule: a standard-mode branch ADD cut short
// before rule 1536 leaves an address with no rule (its table reads as
// main); Inspect does not take main for the table of a VLAN (154) whose
// link is missing, and, the address being on no ENI subnet, names nothing:
// ipamd's reply is the source that knows the VLAN.
func TestInspectBranchBeforeItsRule(t *testing.T) {
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
	b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: trunk}
	a := netip.MustParseAddr("10.1.0.21")
	d := New(nil)
	if err := d.Setup(host, pod, Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: a, Table: 107}}, Branch: b}); err != nil {
		t.Fatal(err)
	}
	if _, err := deleteRules(host, nil, fromPodRuleMatcher(a, func(int) bool { return true })); err != nil {
		t.Fatal(err)
	}
	got, err := d.Inspect(host, pod, "eth0")
	if err != nil || got != nil {
		t.Fatalf("inspect: %+v %v, want nothing", got, err)
	}
}

// TestStrictBranchTeardownKeepsItsTie: in strict mode the iif rule of the
// pod's veth is what ties the pod to its VLAN; when the VLAN link cannot
// be deleted, the rules stay (and the pod's interface), so a retry that
// has only the pod's namespace to go on still finds the branch pod and
// removes everything.
func TestStrictBranchTeardownKeepsItsTie(t *testing.T) {
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
	b := &Branch{VlanID: 7, ENIMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, SubnetGW: netip.MustParseAddr("10.1.0.1"), ParentIndex: trunk, Strict: true}
	p := Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: netip.MustParseAddr("10.1.0.21"), Table: 107}}, Branch: b}
	fp := &failpoint.Set{}
	d := New(nil).WithFailpoints(fp)
	if err := d.Setup(host, pod, p); err != nil {
		t.Fatal(err)
	}
	if err := fp.Arm(failpoint.Name("driver/"+StepDelVlanLink), failpoint.Error, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Teardown(host, pod, p); err == nil {
		t.Fatal("the teardown succeeded with its VLAN link left")
	}
	got, err := d.Inspect(host, pod, "eth0")
	if err != nil || got == nil || got.Branch == nil || got.Branch.VlanID != 7 {
		t.Fatalf("the retry cannot find the branch pod: %+v %v", got, err)
	}
	if _, err := d.Teardown(host, pod, *got); err != nil {
		t.Fatal(err)
	}
	after, _ := kernel.Snapshot(host)
	if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
		t.Fatalf("left %v, lost %v", added, removed)
	}
}
