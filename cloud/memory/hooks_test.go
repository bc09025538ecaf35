package memory

import (
	"context"
	"sync"
	"testing"

	"github.com/vpccni/vpccni/cloud"
)

// TestHooks: OnAttach sees the ENI as attached, OnDetach as it was; both
// run outside the lock (they call back into the model).
func TestHooks(t *testing.T) {
	var attached, detached []cloud.ENI
	var c *Cloud
	c = mustCloud(t, "m5.large", Options{Bare: true,
		OnAttach: func(e cloud.ENI) {
			attached = append(attached, e)
			if _, err := c.Instance(context.Background()); err != nil { // would deadlock under the lock
				t.Error(err)
			}
		},
		OnDetach: func(e cloud.ENI) { detached = append(detached, e); c.Calls() },
	})
	p := c.Provider()
	eni, err := p.AllocENI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(attached) != 1 || attached[0].ID != eni.ID || attached[0].DeviceNumber != 1 || attached[0].MAC != eni.MAC ||
		attached[0].Gateway.String() != "10.0.1.1" || attached[0].PrimaryIP != eni.PrimaryIP {
		t.Fatalf("OnAttach got %+v, AllocENI returned %+v", attached, eni)
	}
	if _, err := p.AssignIPv4(context.Background(), eni.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.FreeENI(context.Background(), eni.ID); err != nil {
		t.Fatal(err)
	}
	if len(detached) != 1 || detached[0].ID != eni.ID || detached[0].DeviceNumber != 1 || len(detached[0].IPv4) != 2 {
		t.Fatalf("OnDetach got %+v", detached)
	}
	// A failed attach calls no hook.
	c.InjectFault("AttachNetworkInterface", Fault{Code: "Throttling", Times: 1})
	if _, err := p.AllocENI(context.Background()); err == nil {
		t.Fatal("AllocENI succeeded through a fault")
	}
	if len(attached) != 1 {
		t.Fatalf("OnAttach ran for a failed attach: %+v", attached)
	}
}

// TestConcurrentUse: many goroutines allocating, assigning, reading and
// freeing at once, with faults flipping; -race checks the locking, the
// end state checks nothing leaked.
func TestConcurrentUse(t *testing.T) {
	c := mustCloud(t, "c5.18xlarge", Options{Bare: true, SubnetBits: 20})
	p := c.Provider()
	inst := mustInstance(t, c)
	before := available(t, c, inst.SubnetID)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5 {
				eni, err := p.AllocENI(context.Background())
				if err != nil {
					// Two workers can pick the same free device; EC2 refuses
					// the second and the provider deletes its ENI.
					if cloud.ErrorCode(err) == "" {
						t.Errorf("worker %d: %v", w, err)
					}
					continue
				}
				if _, err := p.AssignIPv4(context.Background(), eni.ID, 3); err != nil && !cloud.IsThrottled(err) {
					t.Errorf("worker %d: %v", w, err)
				}
				if _, err := p.AssignIPv4Prefixes(context.Background(), eni.ID, 1); err != nil && !cloud.IsThrottled(err) {
					t.Errorf("worker %d: %v", w, err)
				}
				if _, err := c.Instance(context.Background()); err != nil && !cloud.IsThrottled(err) {
					t.Errorf("worker %d: %v", w, err)
				}
				if i%2 == 0 {
					c.InjectFault("AssignPrivateIpAddresses", Fault{Code: "Throttling", Times: 1})
				}
				for {
					err := p.FreeENI(context.Background(), eni.ID)
					if err == nil {
						break
					}
					if !cloud.IsThrottled(err) {
						t.Errorf("worker %d: %v", w, err)
						break
					}
				}
				_ = c.Calls()
			}
		})
	}
	wg.Wait()
	c.ClearFaults()
	if got := mustInstance(t, c); len(got.ENIs) != 1 {
		t.Errorf("%d ENIs left, want the primary", len(got.ENIs))
	}
	if got := available(t, c, inst.SubnetID); got != before {
		t.Errorf("available %d, want %d: addresses leaked", got, before)
	}
}
