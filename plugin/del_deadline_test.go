package plugin

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/driver"
)

// TestDelCallHasIpamdDeadline: the DelNetwork call carries the netconf's
// ipamdTimeout as its deadline, so an ipamd that accepts and never answers
// cannot hold the DEL (and the runtime's retries) forever. The stand-in
// ipamd gives up by itself after a few seconds so that a missing deadline
// fails the test instead of hanging it.
func TestDelCallHasIpamdDeadline(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	var deadline time.Duration
	var hasDeadline bool
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
				var d time.Time
				d, hasDeadline = ctx.Deadline()
				deadline = time.Until(d)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(3 * time.Second):
					return nil, errors.New("stand-in ipamd gave up first")
				}
			}),
		// ipamd did not take the veth pair: the DEL deletes it.
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
	)
	start := time.Now()
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
		t.Fatalf("DEL = %v, want success", err)
	}
	if !hasDeadline || deadline > 200*time.Millisecond {
		t.Fatalf("DelNetwork deadline: set %v, in %v; want ipamdTimeout (200ms)", hasDeadline, deadline)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("DEL took %v against a silent ipamd, want about ipamdTimeout", took)
	}
}

// hangingInventory is a vpccni ipamd that accepts the DEL's question and
// never answers it; it notes the deadline the question carried.
type hangingInventory struct {
	listingInventory
	deadline *time.Time
}

func (h hangingInventory) ListAllocations(ctx context.Context, _ *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	*h.deadline, _ = ctx.Deadline()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(3 * time.Second):
		return nil, errors.New("stand-in ipamd gave up first")
	}
}

// TestDelIpamdTimeoutBoundsBothCalls: a DEL asks ipamd what the sandbox
// holds and then releases it; ipamdTimeout bounds the two together. An
// ipamd that hangs on the question must not be given the whole timeout
// again for the release: the release carries the question's deadline, and
// the DEL queues it (it is torn down) as soon as that has passed.
func TestDelIpamdTimeoutBoundsBothCalls(t *testing.T) {
	r := newRig(t)
	r.expectHandles(true)
	var asked, released time.Time
	r.p.env.DialInventory = func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		return hangingInventory{deadline: &asked}, nil, nopCloser{}, nil
	}
	gomock.InOrder(
		// ipamd could not say what the sandbox holds: the namespace is read.
		r.drv.EXPECT().Inspect(r.host, r.pod, "eth0").Return(nil, errors.New("nothing read back")),
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
				var ok bool
				if released, ok = ctx.Deadline(); !ok {
					t.Error("DelNetwork has no deadline")
				}
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}),
	)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
		t.Fatalf("DEL = %v, want success (torn down, release queued)", err)
	}
	if asked.IsZero() || !released.Equal(asked) {
		t.Fatalf("ListAllocations deadline %v, DelNetwork deadline %v: want one deadline for both", asked, released)
	}
}
