package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/scenarios/policy"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// A fleet's node answers Running and Pods from what it read while no pod
// has moved: every move, by an event or by kubelet's retries inside an
// Advance, must make it read again.
func TestNodePodsFollowEveryMove(t *testing.T) {
	vpc, err := memory.NewVPC(memory.VPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeConfig{Name: "n1", Mode: "ipv4", Policy: policy.Default{}, Launch: vpc.Launch,
		Node: spec.Node{InstanceType: "m5.large", Start: "fresh", KubeletRetries: 5, WarmPool: &spec.WarmPool{WarmIPTarget: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	check := func(when string, running, count int) {
		t.Helper()
		got, gotCount := append([]PodInfo(nil), n.Running()...), n.Pods()
		n.pods.known = false // read afresh
		want, wantCount := n.Running(), n.Pods()
		if !reflect.DeepEqual(got, want) || gotCount != wantCount {
			t.Fatalf("%s: the node answered %d running %+v, %d pods; read afresh %d running %+v, %d pods",
				when, len(got), got, gotCount, len(want), want, wantCount)
		}
		if len(want) != running || wantCount != count {
			t.Fatalf("%s: %d running, %d pods; want %d and %d", when, len(want), wantCount, running, count)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n.Advance(30 * time.Second) // the warm pool grows
	check("at start", 0, 0)
	must(n.Add("default/web-1"))
	must(n.Add("default/web-2"))
	check("after two ADDs", 2, 2)
	n.Advance(time.Minute)
	check("after a minute", 2, 2)
	must(n.Evict())
	must(n.Delete("default/web-1"))
	check("after a DEL without ipamd", 1, 1)
	must(n.Add("default/web-3")) // fails: kubelet retries it on ipamd's ticks
	check("after an ADD without ipamd", 1, 2)
	must(n.CancelEviction("kept"))
	check("after aws-node is back", 1, 2)
	// Kubelet stops web-3's failed sandbox (a DEL retry) and retries its
	// ADD (on ipamd's ticks) inside Advances: in steps short enough that
	// each move has its own.
	for at, end := n.Now(), n.Now()+2*time.Minute; at < end; at += 500 * time.Millisecond {
		n.Advance(at)
		running, count := len(n.Running()), n.Pods() // (what the node answers; check compares it with a fresh read)
		check("at "+at.String(), running, count)
	}
	check("after kubelet's retries", 2, 2)
}
