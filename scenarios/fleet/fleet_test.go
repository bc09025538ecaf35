package fleet

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/scenarios/engine"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

func run(t *testing.T, f *spec.Fleet, pol string, opt Options) *Result {
	t.Helper()
	p, err := policy.ByName(pol)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(f, p, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s under %s: %d nodes, %d pods, %d drains, calls %v, findings %v", f.Name, pol, res.Nodes, res.Pods, res.Drains, res.Calls, res.ByKind)
	return res
}

// The library's 20-node hour: vpccni's flow is clean; the pre-#2048 flow
// leaks rules on drained nodes, and once the addresses they name are
// given to pods on other nodes, traffic to them from the leaking node
// leaves by the wrong ENI.
func TestTwentyNodeHour(t *testing.T) {
	f, err := spec.LoadFleet("../fleets/autoscaler-20-nodes-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := run(t, f, "default", Options{})
	if !def.Match || len(def.Findings) != 0 {
		t.Fatalf("vpccni's flow: want clean, got %v (first: %+v)", def.ByKind, def.First)
	}
	if def.Nodes < 20 || def.Pods < 240 || def.Drains == 0 || def.Calls["DEL"] == 0 {
		t.Fatalf("the fleet did not run as described: %+v", def)
	}
	old := run(t, f, "ref-v1.11", Options{})
	if !old.Match {
		t.Fatalf("ref-v1.11: want %v, got %v", old.Expected, old.ByKind)
	}
	cross := false
	for _, fd := range old.Findings {
		if fd.Kind == invariant.Misroute && strings.Contains(fd.What, "on node") && !strings.Contains(fd.What, "node "+fd.Node+")") {
			cross = true
		}
	}
	if !cross {
		t.Fatalf("ref-v1.11: no cross-node MISROUTE among %v", old.Findings)
	}
	if old.First == nil || len(old.First.Kernel) == 0 || len(old.First.Recent) == 0 {
		t.Fatalf("ref-v1.11: no report of the first finding's node: %+v", old.First)
	}
}

const small = `
name: small
seed: 7
duration: 30m
nodeGroups:
  - name: ng
    nodes: 4
    maxPods: 16
    node: {instanceType: m5.large, warmPool: {warmIPTarget: 2, minimumIPTarget: 4}}
pods: {perNode: 12, createPerHour: 120, deletePerHour: 120}
drains: {perHour: 6, cancelPercent: CANCEL, takes: 2m}
expect: {default: [clean]}
`

func smallFleet(t *testing.T, cancel string) *spec.Fleet {
	f, err := spec.ParseFleet([]byte(strings.Replace(small, "CANCEL", cancel, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Each cluster invariant fires on a world broken for it, under vpccni's
// flow, which is clean unbroken.
func TestClusterInvariantsFire(t *testing.T) {
	if r := run(t, smallFleet(t, "0"), "default", Options{}); len(r.Findings) != 0 {
		t.Fatalf("unbroken: want clean, got %v", r.Findings)
	}
	cases := []struct {
		name   string
		cancel string
		kind   string
		brk    func(t *testing.T) func(*World)
	}{
		{"an address indexed for a second pod", "100", invariant.DoubleAssign, func(t *testing.T) func(*World) {
			done := false
			return func(w *World) {
				if done || len(w.nodes) < 2 {
					return
				}
				for _, h := range w.index {
					other := w.nodes[0].Name()
					if other == h.node {
						other = w.nodes[1].Name()
					}
					done = true
					w.onHold(other, engine.PodInfo{Name: "apps/intruder", IP: h.pod.IP}, true)
					return
				}
			}
		}},
		{"a rule sending the VPC out of the main table on one node", "100", invariant.Misroute, func(t *testing.T) func(*World) {
			done := false
			return func(w *World) {
				if done || w.now == 0 {
					return
				}
				done = true
				_, vpc, _ := net.ParseCIDR("10.0.0.0/16")
				if err := w.nodes[0].Kernel().RuleAdd(kernel.Rule{Priority: 100, Dst: vpc, Table: kernel.TableMain, Family: kernel.FamilyV4}); err != nil {
					t.Error(err)
				}
			}
		}},
		{"ENIs attached without DeleteOnTermination", "0", Stranded, func(t *testing.T) func(*World) {
			return func(w *World) {
				for _, n := range w.nodes {
					keepENIs(t, n.Node)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, smallFleet(t, c.cancel), "default", Options{Break: c.brk(t)})
			if r.ByKind[c.kind] == 0 {
				t.Fatalf("want %s, got %v", c.kind, r.Findings)
			}
		})
	}
}

// keepENIs turns DeleteOnTermination off on a node's ENIs, as a crash
// between attaching an ENI and marking it would leave it, and marks them
// as not vpccni's, so that no leaked-ENI sweep may delete them (an ENI
// of another agent, or of a build that did not tag it).
func keepENIs(t *testing.T, n *engine.Node) {
	c := n.Cloud()
	out, err := c.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{n.InstanceID()}}}})
	if err != nil {
		return // terminated meanwhile
	}
	for _, ni := range out.NetworkInterfaces {
		if ni.Attachment == nil || aws.ToInt32(ni.Attachment.DeviceIndex) == 0 {
			continue
		}
		if _, err := c.ModifyNetworkInterfaceAttribute(context.Background(), &ec2.ModifyNetworkInterfaceAttributeInput{
			NetworkInterfaceId: ni.NetworkInterfaceId,
			Attachment:         &types.NetworkInterfaceAttachmentChanges{AttachmentId: ni.Attachment.AttachmentId, DeleteOnTermination: aws.Bool(false)},
		}); err != nil {
			t.Error(err)
		}
		if _, err := c.CreateTags(context.Background(), &ec2.CreateTagsInput{Resources: []string{aws.ToString(ni.NetworkInterfaceId)},
			Tags: []types.Tag{{Key: aws.String(cloud.TagManaged), Value: aws.String("false")}}}); err != nil {
			t.Error(err)
		}
	}
}

// pods.rampUp spreads the first pods over the fleet's first minutes: the
// warm pools grow ahead of them, so far fewer ADDs fail and are retried
// than when every pod lands at once on nodes with empty pools.
func TestRampUpSpreadsTheFirstPods(t *testing.T) {
	calls := func(f *spec.Fleet) (adds, pods int) {
		res, err := Run(f, policy.Default{}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Match {
			t.Fatalf("rampUp %s: %v", f.Pods.RampUp, res.Findings)
		}
		return res.Calls["ADD"], res.Pods
	}
	at := smallFleet(t, "50")
	ramped := smallFleet(t, "50")
	ramped.Pods.RampUp.Duration = 5 * time.Minute
	addsAt, podsAt := calls(at)
	addsRamped, podsRamped := calls(ramped)
	t.Logf("ADDs: %d for %d pods placed at once, %d for %d ramped over 5m", addsAt, podsAt, addsRamped, podsRamped)
	if addsRamped >= addsAt-podsAt/2 {
		t.Fatalf("ramped: %d ADDs, at once %d: want far fewer retried ADDs", addsRamped, addsAt)
	}
}
