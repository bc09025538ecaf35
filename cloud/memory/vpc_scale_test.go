package memory

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TestVPCFleetScale: a thousand nodes in one VPC, each with two ENIs of
// addresses; reading any node costs its own ENIs, not the fleet's.
func TestVPCFleetScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a thousand instances")
	}
	v := mustVPC(t, VPCOptions{})
	var nodes []*Cloud
	for range 1000 {
		c := mustLaunch(t, v, "m5.large", Options{})
		e := mustAllocENI(t, c)
		mustAssign(t, c, e.ID, 9)
		nodes = append(nodes, c)
	}
	seen := map[string]bool{}
	for _, c := range nodes {
		inst := mustInstance(t, c)
		if len(inst.ENIs) != 2 || len(inst.ENIs[1].IPv4) != 9 {
			t.Fatalf("%s: %+v", c.InstanceID(), inst.ENIs)
		}
		for _, e := range inst.ENIs {
			if seen[e.MAC] || seen[e.ID] {
				t.Fatalf("MAC %s or ID %s twice in the VPC", e.MAC, e.ID)
			}
			seen[e.MAC], seen[e.ID] = true, true
			if id, eni, ok := v.Holder(e.PrimaryIP); !ok || id != c.InstanceID() || eni != e.ID {
				t.Fatalf("Holder of %s's %s: %s %s", c.InstanceID(), e.PrimaryIP, id, eni)
			}
		}
	}
	for _, c := range nodes[:500] {
		if err := v.Terminate(c.InstanceID()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.Instances()); n != 500 || len(v.AvailableENIs()) != 0 {
		t.Errorf("%d instances, %d stranded ENIs", n, len(v.AvailableENIs()))
	}
}

// TestVPCDescribeLooksAtOwnENIs: ipamd's describe (filtered on its
// instance) looks only at that instance's ENIs, whatever the fleet's
// size; the filters alone would give the same answer at the fleet's cost.
func TestVPCDescribeLooksAtOwnENIs(t *testing.T) {
	v := mustVPC(t, VPCOptions{})
	a, b := mustLaunch(t, v, "m5.large", Options{}), mustLaunch(t, v, "m5.large", Options{})
	mustAllocENI(t, a)
	mustAllocENI(t, b)
	in := &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{a.InstanceID()}}}}
	v.v.mu.Lock()
	got, err := a.describeCandidates("DescribeNetworkInterfaces", in)
	v.v.mu.Unlock()
	if err != nil || len(got) != 2 {
		t.Fatalf("candidates %d, %v; want A's 2 ENIs", len(got), err)
	}
	for _, e := range got {
		if e.att == nil || e.att.inst != a {
			t.Errorf("candidate %s is not A's", e.id)
		}
	}
	out, err := a.DescribeNetworkInterfaces(bg, in)
	if err != nil || len(out.NetworkInterfaces) != 2 {
		t.Fatalf("describe: %v", err)
	}
	// Unfiltered, EC2 lists the VPC's ENIs.
	if out, err = a.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{}); err != nil || len(out.NetworkInterfaces) != 4 {
		t.Errorf("unfiltered describe: %d ENIs, %v", len(out.NetworkInterfaces), err)
	}
}
