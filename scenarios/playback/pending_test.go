package playback

import (
	"strings"
	"testing"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// TestPlaybackPendingIsNotALeak: the eviction journal cut after stopp's
// DELs, replayed with the reference's pre-fix DEL: both DELs fail without
// teardown, so web-0 and web-5 are pending (the runtime retries) and
// their objects are neither a leak nor required. The full journal shows
// the same objects as LEAK once rmp's DEL succeeded without teardown.
func TestPlaybackPendingIsNotALeak(t *testing.T) {
	es := eviction(t).entries()
	pol, err := policy.ByName("ref-v1.11")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Play(es[:9], Options{Policy: pol}) // 6 ADD, CHECK, 2 DEL
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, p := range rep.Pods {
		states[p.Name] = p.State
	}
	if states["default/web-0"] != StatePending || states["default/web-5"] != StatePending {
		t.Fatalf("states %v", states)
	}
	if len(rep.Violations) != 0 {
		t.Fatalf("violations %v", rep.Violations)
	}
	if !contains(rep.Left[NodeNS], "rule 1536: from 10.0.2.11 lookup 2") {
		t.Fatalf("web-5's rules are not there: %v", rep.Left[NodeNS])
	}
}

// TestAccountingFlagsWrongReleases: a GC that releases an attachment its
// runtime listed as valid, or an invocation releasing another live pod's
// address, is an IPAM violation; a GC releasing a stale one is not, and
// leaves it deleted.
func TestAccountingFlagsWrongReleases(t *testing.T) {
	ps := newPods()
	live := func(cid string) {
		e := &journal.Entry{Env: journal.Env{Command: "ADD", ContainerID: cid, IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + cid},
			Stdin: []byte(`{"cniVersion":"1.1.0","name":"aws-cni","type":"vpc-cni"}`)}
		id := ps.identify(e)
		ps.begin(id.key, e)
		ps.account("AddNetwork", &rpc.AddNetworkRequest{ContainerID: cid, IfName: "eth0"},
			&rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.1." + cid[len(cid)-1:]}}}, 0)
		ps.apply(id, e, nil, nil)
		ps.byKey[id.key].State = StateLive
	}
	live("web-1")
	live("web-2")
	live("web-3")
	release := func(cid, reason string) {
		ps.account("DelNetwork", &rpc.DelNetworkRequest{ContainerID: cid, IfName: "eth0", Reason: reason}, &rpc.DelNetworkReply{Success: true}, 0)
	}
	gc := &journal.Entry{Env: journal.Env{Command: "GC"},
		Stdin: []byte(`{"cniVersion":"1.1.0","name":"aws-cni","type":"vpc-cni","cni.dev/valid-attachments":[{"containerID":"web-1","ifname":"eth0"}]}`)}
	ps.begin("/", gc)
	release("web-1", plugin.ReasonGC) // valid: wrong
	release("web-2", plugin.ReasonGC) // not valid: fine
	ps.apply(podID{key: "/"}, gc, nil, nil)
	other := &journal.Entry{Env: journal.Env{Command: "DEL", ContainerID: "web-9", IfName: "eth0"}, Stdin: gc.Stdin}
	ps.begin(key("web-9", "eth0"), other)
	release("web-3", plugin.ReasonPodDeleted) // someone else's live pod: wrong
	var what []string
	for _, v := range ps.violations() {
		if v.Kind != invariant.IPAM {
			t.Errorf("kind %s", v.Kind)
		}
		what = append(what, v.What)
	}
	got := strings.Join(what, "\n")
	want := "ipamd released 10.0.1.1 of default/web-1: GC released an attachment the runtime listed as valid\n" +
		"ipamd released 10.0.1.3 of default/web-3: released by another invocation while the pod was live"
	if got != want {
		t.Fatalf("violations\n%s\nwant\n%s", got, want)
	}
	if ps.byKey[key("web-2", "eth0")].State != StateDeleted || ps.byKey[key("web-1", "eth0")].State != StateDeleted {
		t.Fatalf("GC'd attachments: %+v %+v", ps.byKey[key("web-2", "eth0")], ps.byKey[key("web-1", "eth0")])
	}
}
