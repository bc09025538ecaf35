package datastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/vpccni/vpccni/cloud/memory"
)

func store(t *testing.T, typ string) *Store {
	c, err := memory.New(typ)
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := c.Instance(context.Background())
	return New(inst)
}

func key(i int) Key {
	return Key{NetworkName: "aws-cni", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
}

func TestAssignIdempotentAndDeterministic(t *testing.T) {
	s := store(t, "m5.large")
	a, err := s.Assign(key(1), Meta{"default", "web-0"}, -1)
	if err != nil || a.IP.String() != "10.0.1.11" || a.DeviceNumber != 0 || a.RouteTable != TableMain {
		t.Fatalf("%+v %v", a, err)
	}
	again, _ := s.Assign(key(1), Meta{}, 2)
	if again != a {
		t.Fatalf("retried assign gave %+v", again)
	}
	b, _ := s.Assign(key(2), Meta{}, 1)
	if b.IP.String() != "10.0.2.11" || b.RouteTable != 2 {
		t.Fatalf("preferDevice 1: %+v", b)
	}
}

func TestReleaseUnknown(t *testing.T) {
	s := store(t, "m5.large")
	if _, err := s.Release(key(1)); !errors.Is(err, ErrUnknownPod) || err.Error() != "datastore: unknown pod" {
		t.Fatalf("err = %v", err)
	}
	a, _ := s.Assign(key(1), Meta{}, -1)
	r, err := s.Release(key(1))
	if err != nil || r.IP != a.IP {
		t.Fatal(r, err)
	}
	if _, err := s.Release(key(1)); !errors.Is(err, ErrUnknownPod) {
		t.Fatal("second release succeeded")
	}
	if !s.Free(a.IP) {
		t.Fatal("released address not free")
	}
}

func TestExhaustion(t *testing.T) {
	s := store(t, "t3.medium") // 3 ENIs x 5 pod addresses
	for i := 0; i < 15; i++ {
		if _, err := s.Assign(key(i), Meta{}, -1); err != nil {
			t.Fatalf("assign %d: %v", i, err)
		}
	}
	if _, err := s.Assign(key(99), Meta{}, -1); !errors.Is(err, ErrNoAvailableIP) {
		t.Fatalf("err = %v", err)
	}
	if st := s.Stats(); st.Total != 15 || st.Assigned != 15 || st.ENIs != 3 {
		t.Fatalf("%+v", st)
	}
}

// TestConcurrentAssign: no address is ever handed to two keys.
func TestConcurrentAssign(t *testing.T) {
	s := store(t, "m5.4xlarge")
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				k := key(i*10 + j)
				if _, err := s.Assign(k, Meta{}, i%8); err != nil {
					t.Error(err)
				}
				if j == 1 {
					s.Release(k)
				}
			}
		}(i)
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, a := range s.Allocations() {
		if seen[a.IP.String()] {
			t.Fatalf("%s assigned twice", a.IP)
		}
		seen[a.IP.String()] = true
	}
	if len(seen) != 128 {
		t.Fatalf("%d allocations, want 128", len(seen))
	}
}
