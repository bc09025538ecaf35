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

// TestTeardownRereadsANodeViewForOtherAddresses: a reading of the node
// made for one address (the DEL's prevResult) is not trusted for another
// (one only ipamd named): the teardown reads the node again, finds that
// address's ENI, and removes its rules, and the other pod's stay.
func TestTeardownRereadsANodeViewForOtherAddresses(t *testing.T) {
	k := model.New()
	for _, ns := range []string{"node", "podA", "podB"} {
		if err := k.AddNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	host, _ := k.Open("node")
	podA, _ := k.Open("podA")
	podB, _ := k.Open("podB")
	plugENIs(t, k, "node", host)
	d := New(nil)
	onPrimary := netip.MustParseAddr("10.0.1.15")
	a := Pod{HostVeth: "eniaaaaaaaaaaa", ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: onPrimary, Table: kernel.TableMain}}}
	b := Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: ip1, Table: 2}}}
	if err := d.Setup(host, podA, a); err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(host, podB, b); err != nil {
		t.Fatal(err)
	}
	view, err := d.ReadNode(host, []netip.Addr{onPrimary})
	if err != nil {
		t.Fatal(err)
	}
	b.Node = view
	if _, err := d.Teardown(host, podB, b); err != nil {
		t.Fatalf("teardown of %s with a reading made for %s: %v", ip1, onPrimary, err)
	}
	rules, err := host.RuleList(kernel.FamilyV4)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range rules {
		if r.Priority == ownership.PrioToPod || r.Priority == ownership.PrioFromPod {
			left = append(left, kernel.RuleString(r))
		}
	}
	if len(left) != 1 || !strings.Contains(left[0], "10.0.1.15") {
		t.Fatalf("pod rules left %q, want only %s's", left, onPrimary)
	}
}

// TestTeardownAfterTheNamespaceWent: with the pod's veth gone, the
// kernel's lookup for its address lands on a less specific route (the
// ENI's subnet, the default): that is no holder, and the pod's rules go.
func TestTeardownAfterTheNamespaceWent(t *testing.T) {
	k := model.New()
	for _, ns := range []string{"node", "pod"} {
		if err := k.AddNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	host, _ := k.Open("node")
	pod, _ := k.Open("pod")
	plugENIs(t, k, "node", host)
	d := New(nil)
	for a, table := range map[netip.Addr]int{ip1: 2, netip.MustParseAddr("10.0.1.15"): kernel.TableMain} { // eth1's subnet; eth0's, with the default route
		p := Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, IPs: []PodIP{{Addr: a, Table: table}}}
		before, _ := kernel.Snapshot(host)
		if err := d.Setup(host, pod, p); err != nil {
			t.Fatal(err)
		}
		if err := pod.LinkDel("eth0"); err != nil {
			t.Fatal(err)
		}
		if res, err := host.RouteGet(kernel.RouteQuery{Dst: a.AsSlice(), FIBMatch: true}); err != nil || samePrefix(res.Route.Dst, ownership.HostPrefix(a)) {
			t.Fatalf("%s: the lookup answers %+v %v, want a less specific route", a, res.Route, err)
		}
		if _, err := d.Teardown(host, nil, p); err != nil {
			t.Fatal(err)
		}
		after, _ := kernel.Snapshot(host)
		if added, removed := kernel.Diff(before, after); len(added)+len(removed) != 0 {
			t.Fatalf("%s: left %v, lost %v", a, added, removed)
		}
	}
}
