package plugin

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/releasequeue"
)

// queueRig is a rig whose DELs queue in a temporary directory.
func queueRig(t *testing.T, max int) (*rig, releasequeue.Queue) {
	r := newRig(t)
	q := releasequeue.Queue{Dir: t.TempDir(), Max: max}
	r.p.env.ReleaseQueue = func(addr string) (releasequeue.Queue, bool) {
		if addr != DefaultIpamdAddress {
			t.Errorf("queue asked for %q", addr)
		}
		return q, true
	}
	return r, q
}

// delTornDown runs a DEL whose prevResult tears the pod down and whose
// release meets ipamd.
func delTornDown(t *testing.T, r *rig, ipamd delFn) error {
	r.expectHandles(true)
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(ipamd),
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
	)
	return r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
}

// A DEL that tore its pod down and could not have its address released
// leaves a record naming its sandbox, its pod, its veth's ifindex and the
// address, and succeeds.
func TestDelQueuesWhatIpamdDidNotRelease(t *testing.T) {
	for name, ipamd := range map[string]delFn{"unreachable": ipamdUnreachable, "timeout": hang, "error": ipamdError} {
		t.Run(name, func(t *testing.T) {
			r, q := queueRig(t, 0)
			if err := delTornDown(t, r, ipamd); err != nil {
				t.Fatalf("DEL = %v, want success", err)
			}
			entries, errs := q.List()
			if len(errs) != 0 || len(entries) != 1 {
				t.Fatalf("queue: %v %v, want one record", entries, errs)
			}
			got := entries[0].Record
			if got.ContainerID != "c1" || got.IfName != "eth0" || got.NetworkName != "aws-cni" || got.PodName != "web-1" ||
				got.PodNamespace != "default" || got.HostVethIndex != 7 || !slices.Equal(got.IPs, []netip.Addr{podIP}) {
				t.Errorf("record %+v", got)
			}
		})
	}
}

// Released, or held by nobody: no record, and a retried DEL that reached
// ipamd removes the one an earlier attempt left.
func TestDelAnsweredLeavesNoRecord(t *testing.T) {
	for name, ipamd := range map[string]delFn{"released": ipamdOK, "unknown pod": ipamdUnknownPod} {
		t.Run(name, func(t *testing.T) {
			r, q := queueRig(t, 0)
			if err := delTornDown(t, r, ipamdUnreachable); err != nil {
				t.Fatal(err)
			}
			if err := delTornDown(t, r, ipamd); err != nil {
				t.Fatal(err)
			}
			if entries, _ := q.List(); len(entries) != 0 {
				t.Fatalf("records left: %v", entries)
			}
		})
	}
}

// A full queue is an error the DEL reports (retry), never a silent drop.
func TestDelFullQueueIsRetried(t *testing.T) {
	r, q := queueRig(t, 1)
	other := releasequeue.Record{Version: releasequeue.Version, NetworkName: "aws-cni", ContainerID: "c-other", IfName: "eth0",
		IPs: []netip.Addr{netip.MustParseAddr("10.0.1.20")}}
	if err := q.Append(other); err != nil {
		t.Fatal(err)
	}
	err := delTornDown(t, r, ipamdUnreachable)
	wantCode(t, err, types.ErrTryAgainLater)
	if !strings.Contains(err.Error(), "release queue") {
		t.Errorf("the error does not name the queue: %v", err)
	}
}

// A DEL killed before its record is written is retried by the runtime
// (the error), and the retry queues it.
func TestDelKilledBeforeQueueing(t *testing.T) {
	r, q := queueRig(t, 0)
	r.p.env.Failpoints = &failpoint.Set{}
	if err := r.p.env.Failpoints.Arm(FailDelQueue, failpoint.Error, 1); err != nil {
		t.Fatal(err)
	}
	wantCode(t, delTornDown(t, r, ipamdUnreachable), types.ErrTryAgainLater)
	if entries, _ := q.List(); len(entries) != 0 {
		t.Fatalf("records: %v", entries)
	}
	if err := delTornDown(t, r, ipamdUnreachable); err != nil {
		t.Fatal(err)
	}
	if entries, _ := q.List(); len(entries) != 1 {
		t.Fatalf("records after the retry: %v", entries)
	}
}

func TestQueueBesideSocket(t *testing.T) {
	q, ok := QueueBesideSocket("unix:///var/run/aws-node/ipamd.sock")
	if !ok || q.Dir != "/var/run/aws-node/release-queue" {
		t.Errorf("unix socket: %v %v", q, ok)
	}
	if _, ok := QueueBesideSocket("127.0.0.1:50051"); ok {
		t.Error("a TCP address has a queue")
	}
}
