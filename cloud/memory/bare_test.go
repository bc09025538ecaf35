package memory

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestBareInstance(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	inst := mustInstance(t, c)
	if len(inst.ENIs) != 1 {
		t.Fatalf("bare instance has %d ENIs, want the primary only", len(inst.ENIs))
	}
	e := inst.ENIs[0]
	if e.DeviceNumber != 0 || e.Subnet.String() != "10.0.1.0/24" || e.Gateway.String() != "10.0.1.1" ||
		e.PrimaryIP.String() != "10.0.1.4" || e.MAC != "02:00:00:00:00:01" || e.SubnetID != inst.SubnetID {
		t.Errorf("primary ENI %+v", e)
	}
	if len(e.IPv4) != 0 || len(e.IPv4Prefixes) != 0 || len(e.IPv6Prefixes) != 0 || e.Trunk {
		t.Errorf("a fresh primary ENI has addresses: %+v", e)
	}
	if len(inst.SecurityGroups) != 1 || !strings.HasPrefix(inst.SecurityGroups[0], "sg-") {
		t.Errorf("security groups %v", inst.SecurityGroups)
	}
	// 256 - 5 reserved - the primary address.
	if got := available(t, c, inst.SubnetID); got != 250 {
		t.Errorf("available = %d, want 250", got)
	}
}

func TestBareTrunkAndSubnetBits(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true, Trunk: true, SubnetBits: 28})
	inst := mustInstance(t, c)
	if len(inst.ENIs) != 2 || !inst.ENIs[1].Trunk || inst.ENIs[1].DeviceNumber != 1 || inst.ENIs[1].PrimaryIP.String() != "10.0.1.5" {
		t.Fatalf("bare trunk instance %+v", inst.ENIs)
	}
	if inst.ENIs[0].Subnet.String() != "10.0.1.0/28" {
		t.Errorf("subnet %s, want 10.0.1.0/28", inst.ENIs[0].Subnet)
	}
	// 16 - 5 reserved - 2 primaries.
	if got := available(t, c, inst.SubnetID); got != 9 {
		t.Errorf("available = %d, want 9", got)
	}
}

func TestOptionsRejected(t *testing.T) {
	for name, opt := range map[string]Options{
		"SubnetBits without Bare": {SubnetBits: 26},
		"SubnetBits /29":          {Bare: true, SubnetBits: 29},
		"SubnetBits /8":           {Bare: true, SubnetBits: 8},
	} {
		if _, err := NewWithOptions("m5.large", opt); err == nil || !strings.Contains(err.Error(), "SubnetBits") {
			t.Errorf("%s: err %v, want a SubnetBits error", name, err)
		}
	}
}

// TestDeterministicAcrossRuns: the same sequence of calls on two models
// gives the same IDs, MACs and addresses.
func TestDeterministicAcrossRuns(t *testing.T) {
	run := func() string {
		c := mustCloud(t, "m5.4xlarge", Options{Bare: true})
		p := c.Provider()
		var log strings.Builder
		for range 3 {
			e, err := p.AllocENI(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ips, err := p.AssignIPv4(context.Background(), e.ID, 3)
			if err != nil {
				t.Fatal(err)
			}
			pfx, err := p.AssignIPv4Prefixes(context.Background(), e.ID, 1)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&log, e, ips, pfx)
		}
		fmt.Fprintln(&log, mustInstance(t, c))
		return log.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, "02:00:00:01:00:01") || !strings.Contains(a, "10.0.1.5") {
		t.Errorf("first created ENI is not 02:00:00:01:00:01 with 10.0.1.5:\n%s", a)
	}
}

func TestPrefilledUnchangedByProvider(t *testing.T) {
	// The prefilled instance read through IMDS and EC2 carries the subnet
	// IDs and security groups too, and two reads are equal.
	c := mustCloud(t, "m5.large", Options{})
	a, b := mustInstance(t, c), mustInstance(t, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two reads differ")
	}
	for _, e := range a.ENIs {
		if !strings.HasPrefix(e.SubnetID, "subnet-") {
			t.Errorf("ENI %d has subnet ID %q", e.DeviceNumber, e.SubnetID)
		}
	}
	if a.SubnetID != a.ENIs[0].SubnetID || a.Limits.ENIs != 3 || a.Limits.IPv4PerENI != 10 {
		t.Errorf("instance %+v", a)
	}
}
