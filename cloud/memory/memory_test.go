package memory

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/cloud"
)

func TestInstanceTypes(t *testing.T) {
	want := map[string][2]int{"t3.medium": {3, 6}, "m5.large": {3, 10}, "m5.4xlarge": {8, 30}, "c5.18xlarge": {15, 50}}
	eniID := regexp.MustCompile(`^eni-0[0-9a-f]{16}$`)
	for typ, lim := range want {
		c, err := New(typ)
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := c.Instance(context.Background())
		if inst.Type != typ || !regexp.MustCompile(`^i-0[0-9a-f]{16}$`).MatchString(inst.ID) {
			t.Errorf("%s: instance %q %q", typ, inst.ID, inst.Type)
		}
		if len(inst.ENIs) != lim[0] {
			t.Fatalf("%s: %d ENIs, want %d", typ, len(inst.ENIs), lim[0])
		}
		ids, seen := map[string]bool{}, map[string]bool{}
		for d, e := range inst.ENIs {
			sub := fmt.Sprintf("10.0.%d.", d+1)
			if e.DeviceNumber != d || e.Subnet.String() != sub+"0/24" || e.Gateway.String() != sub+"1" ||
				e.PrimaryIP.String() != sub+"10" || e.MAC != fmt.Sprintf("02:00:00:00:%02x:01", d) || !eniID.MatchString(e.ID) {
				t.Errorf("%s device %d: %+v", typ, d, e)
			}
			if len(e.IPv4) != lim[1]-1 {
				t.Errorf("%s device %d: %d pod addresses, want %d", typ, d, len(e.IPv4), lim[1]-1)
			}
			for i, ip := range e.IPv4 {
				if ip.String() != fmt.Sprintf("%s%d", sub, 11+i) || seen[ip.String()] {
					t.Errorf("%s device %d: address %d is %s", typ, d, i, ip)
				}
				seen[ip.String()] = true
			}
			if ids[e.ID] {
				t.Errorf("%s: duplicate ENI ID %s", typ, e.ID)
			}
			ids[e.ID] = true
			if (d == 0) != (len(e.IPv6Prefixes) == 1) {
				t.Errorf("%s device %d: IPv6 prefixes %v", typ, d, e.IPv6Prefixes)
			}
		}
		p := inst.ENIs[0].IPv6Prefixes[0]
		if p.Bits() != 80 || p != p.Masked() || !p.Addr().Is6() {
			t.Errorf("IPv6 prefix %s is not a /80", p)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, _ := New("m5.4xlarge")
	b, _ := New("m5.4xlarge")
	ia, _ := a.Instance(context.Background())
	ib, _ := b.Instance(context.Background())
	if !reflect.DeepEqual(ia, ib) {
		t.Fatal("two clouds of one type differ")
	}
	c, _ := New("m5.large")
	ic, _ := c.Instance(context.Background())
	if ic.ID == ia.ID || ic.ENIs[0].ID == ia.ENIs[0].ID {
		t.Error("different instance types share IDs")
	}
}

func TestInstanceIsACopy(t *testing.T) {
	c, _ := New("m5.large")
	inst, _ := c.Instance(context.Background())
	inst.ENIs[0].IPv4[0] = inst.ENIs[0].PrimaryIP
	inst.ENIs[0].IPv6Prefixes[0] = inst.ENIs[0].Subnet
	inst.ENIs = inst.ENIs[:1]
	again, _ := c.Instance(context.Background())
	if len(again.ENIs) != 3 || again.ENIs[0].IPv4[0].String() != "10.0.1.11" || again.ENIs[0].IPv6Prefixes[0] != PrimaryIPv6Prefix {
		t.Fatal("Instance returned shared state")
	}
}

func TestUnknownType(t *testing.T) {
	_, err := New("x1.banana")
	if err == nil {
		t.Fatal("accepted an unknown type")
	}
	for _, k := range Known() {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not list %s", err, k)
		}
	}
	if got := Known(); !reflect.DeepEqual(got, cloud.KnownTypes()) {
		t.Errorf("Known() = %v, want cloud's table %v", got, cloud.KnownTypes())
	}
}

// TestTrunk: the trunk takes the last slot and has no pod addresses; the
// other ENIs are exactly New's.
func TestTrunk(t *testing.T) {
	plain, _ := New("m5.large")
	c, err := NewWithOptions("m5.large", Options{Trunk: true})
	if err != nil {
		t.Fatal(err)
	}
	ip, _ := plain.Instance(context.Background())
	it, _ := c.Instance(context.Background())
	if len(it.ENIs) != 3 || !reflect.DeepEqual(it.ENIs[:2], ip.ENIs[:2]) {
		t.Fatalf("pod ENIs differ from New's: %+v", it.ENIs)
	}
	tr := it.ENIs[2]
	if !tr.Trunk || tr.DeviceNumber != 2 || len(tr.IPv4) != 0 || len(tr.IPv6Prefixes) != 0 || tr.MAC != "02:00:00:00:02:01" {
		t.Fatalf("trunk %+v", tr)
	}
	if got, ok := it.Trunk(); !ok || got.ID != tr.ID {
		t.Fatalf("Instance.Trunk = %+v %v", got, ok)
	}
	if _, ok := ip.Trunk(); ok {
		t.Fatal("New attached a trunk")
	}
	if _, err := NewWithOptions("x1.banana", Options{Trunk: true}); err == nil {
		t.Fatal("accepted an unknown type")
	}
}
