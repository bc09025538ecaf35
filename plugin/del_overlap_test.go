package plugin

import (
	"context"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/mocks/mock_driver"
	"github.com/vpccni/vpccni/plugin/driver"
)

// meetingInventory answers ListAllocations only once the node's reading
// has begun, and says whether it had to wait for it in vain.
type meetingInventory struct {
	rpc.InventoryClient
	asked, reading chan struct{}
	missed         *bool
}

func (m meetingInventory) ListAllocations(context.Context, *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	close(m.asked)
	select {
	case <-m.reading:
	case <-time.After(2 * time.Second):
		*m.missed = true
	}
	return &rpc.ListAllocationsReply{}, nil
}

// TestDelReadsTheNodeWhileIpamdAnswers: the node is read for the
// prevResult's address while ipamd answers, not after (each side waits
// for the other to have begun: one after the other, they would time out),
// and the first teardown is given that reading.
func TestDelReadsTheNodeWhileIpamdAnswers(t *testing.T) {
	r := newRig(t)
	r.drv = mock_driver.NewMockNetworker(r.ctrl) // without newRig's empty reading
	r.p.env.Driver = r.drv
	missedRead, missedAsk := false, false
	inv := meetingInventory{asked: make(chan struct{}), reading: make(chan struct{}), missed: &missedRead}
	r.p.env.DialInventory = func(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		return inv, nil, nopCloser{}, nil
	}
	view := &driver.NodeView{}
	r.expectHandles(true)
	r.drv.EXPECT().ReadNode(r.host, gomock.Any()).DoAndReturn(func(_ any, addrs []netip.Addr) (*driver.NodeView, error) {
		if !slices.Equal(addrs, []netip.Addr{netip.MustParseAddr("10.0.2.11")}) {
			t.Errorf("the node read for %v, want the prevResult's 10.0.2.11", addrs)
		}
		close(inv.reading)
		select {
		case <-inv.asked:
		case <-time.After(2 * time.Second):
			missedAsk = true
		}
		return view, nil
	})
	withView := leftVeth(prevPod)
	withView.Node = view
	r.drv.EXPECT().Teardown(r.host, r.pod, withView).Return(driver.Report{}, nil)
	r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(takenReply, nil)
	if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
		t.Fatalf("DEL = %v, want success", err)
	}
	if missedRead || missedAsk {
		t.Errorf("the node's reading and ipamd's answer did not overlap (reading waited in vain %v, question %v)", missedAsk, missedRead)
	}
}
