package memory

import (
	"context"
	"testing"
)

func TestInstanceLimits(t *testing.T) {
	c, err := New("m5.large")
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := c.Instance(context.Background())
	if len(inst.ENIs) != 3 {
		t.Fatalf("%d ENIs", len(inst.ENIs))
	}
	for d, e := range inst.ENIs {
		if e.DeviceNumber != d || len(e.IPv4) != 9 || !e.Subnet.Contains(e.PrimaryIP) || !e.Subnet.Contains(e.IPv4[0]) {
			t.Errorf("ENI %d: %+v", d, e)
		}
	}
	if inst.ENIs[1].IPv4[0].String() != "10.0.2.11" {
		t.Errorf("first address of device 1: %s", inst.ENIs[1].IPv4[0])
	}
	inst.ENIs[0].IPv4[0] = inst.ENIs[0].PrimaryIP
	again, _ := c.Instance(context.Background())
	if again.ENIs[0].IPv4[0] == again.ENIs[0].PrimaryIP {
		t.Error("Instance returned shared state")
	}
}

func TestUnknownType(t *testing.T) {
	if _, err := New("x1.banana"); err == nil {
		t.Fatal("accepted")
	}
}
