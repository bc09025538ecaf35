package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang/mock/gomock"
	"google.golang.org/grpc"

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
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *rpc.DelNetworkRequest, _ ...grpc.CallOption) (*rpc.DelNetworkReply, error) {
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
