package plugin

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/attachrec"
)

// The attachment record as a DEL source, on the hostile world (the real
// driver on the kernel model, the plugin's own ADDs).

func (w *hostileWorld) store() attachrec.Store {
	return attachrec.Store{Dir: attachrec.DirFor(w.stateDir)}
}

func (w *hostileWorld) record(t *testing.T) (attachrec.Record, error) {
	t.Helper()
	return w.store().Load("aws-cni", "c-"+victimName, "eth0")
}

// forget is ipamd restarted without its checkpoint: it holds nothing for
// the victim and answers its release "unknown pod".
func (w *hostileWorld) forget(name string) {
	w.ipamd.mu.Lock()
	defer w.ipamd.mu.Unlock()
	delete(w.ipamd.alloc, name)
}

// TestAddWritesRecord: the ADD's record names what the ADD built,
// with the host veth's ifindex as the kernel shows it.
func TestAddWritesRecord(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	rec, err := w.record(t)
	if err != nil {
		t.Fatal(err)
	}
	l, err := w.node.LinkByName(testHostVeth)
	if err != nil {
		t.Fatal(err)
	}
	want := []attachrec.IP{{Addr: netip.MustParseAddr("10.0.2.11"), Table: 2}}
	if rec.HostVeth != testHostVeth || rec.HostVethIndex != l.Index || !slices.Equal(rec.IPs, want) || rec.Device != 1 ||
		rec.Netns != w.victim.netns || rec.PodName != victimName {
		t.Fatalf("record %+v; want veth %s index %d, %v on device 1", rec, testHostVeth, l.Index, want)
	}
}

// TestDelFromRecordAlone is containerd's second DEL after ipamd lost its
// memory: no prevResult, an empty CNI_NETNS, ipamd knows nothing. Only
// the record names the pod: it is torn down, and the record goes.
func TestDelFromRecordAlone(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	w.forget(victimName)
	rec, err := w.record(t)
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's namespace is gone, and with it the veth pair and its
	// host route: the rules are what is left, and nothing else names them.
	if err := w.k.DeleteNamespace(w.victim.netns); err != nil {
		t.Fatal(err)
	}
	before := w.snap(t, hostileNode)
	args := w.victim.cmdArgs(hostileConf(t, w, w.format, nil))
	args.Netns = ""
	if err := w.p.Del(args); err != nil {
		t.Fatalf("DEL from the record alone: %v", err)
	}
	after := w.snap(t, hostileNode)
	_, removed := kernel.Diff(before, after)
	if left := kernel.Minus(w.victim.lines, kernel.Minus(w.victim.lines, after.Lines())); len(left) > 0 || len(removed) == 0 {
		t.Fatalf("DEL from the record alone removed %q; left of the victim %q", removed, left)
	}
	if _, err := w.record(t); !errors.Is(err, attachrec.ErrNotFound) {
		t.Fatalf("the record after a successful DEL: %v, want it removed", err)
	}
	// The namespace gave no proof of the sandbox's veth; the record did.
	if got := w.ipamd.proofs[victimName]; got == 0 || int(got) != rec.HostVethIndex {
		t.Fatalf("the release offered host veth ifindex %d, want the record's %d", got, rec.HostVethIndex)
	}
}

// TestDelRecordContradicted: a record naming an address the node does
// not show to be a pod's (a foreign rule holds 192.168.7.7) is set aside
// as a contradicted prevResult is: code 7, the victim torn down from
// ipamd's record and its namespace, nothing foreign touched, and the
// record kept since the DEL failed.
func TestDelRecordContradicted(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	rec, err := w.record(t)
	if err != nil {
		t.Fatal(err)
	}
	rec.IPs = append(rec.IPs, attachrec.IP{Addr: netip.MustParseAddr("192.168.7.7"), Table: 2})
	if err := w.store().Write(rec); err != nil {
		t.Fatal(err)
	}
	run := w.del(t, nil)
	if p := run.problems(outcome{code: types.ErrInvalidNetworkConfig, tornDown: true, released: true}); len(p) > 0 {
		t.Fatalf("DEL with a contradicted record: %v", p)
	}
	var ce *types.Error
	if errors.As(run.err, &ce) && !strings.Contains(ce.Msg, "record") {
		t.Fatalf("the error does not name the record: %v", run.err)
	}
	if _, err := w.record(t); err != nil {
		t.Fatalf("the record after a failed DEL: %v, want it kept", err)
	}
}

// TestDelBadRecord: an undecodable record is set aside (*.bad) and never
// read; the DEL succeeds from the prevResult and ipamd.
func TestDelBadRecord(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	path := filepath.Join(w.store().Dir, attachrec.Name("aws-cni", "c-"+victimName, "eth0"))
	if err := os.WriteFile(path, []byte(`{"version":"vpccni-attachment/1","ips":[{"addr":"10.0.2.11","table":255}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := w.del(t, w.genuine())
	if p := run.problems(outcome{tornDown: true, released: true}); len(p) > 0 {
		t.Fatalf("DEL with a bad record: %v", p)
	}
	if _, err := os.Stat(path + ".bad"); err != nil {
		t.Fatalf("the bad record is not set aside: %v", err)
	}
}

// TestAddRecordUnwritable: an ADD whose record cannot be written fails
// with code 102 and leaves nothing: the node as before, the address
// returned to ipamd.
func TestAddRecordUnwritable(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	blocked := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	third := &hostilePod{name: "web-3", netns: "/var/run/netns/web-3"}
	w.ipamd.mu.Lock()
	w.ipamd.alloc["web-3"] = &rpc.IPAllocationMetadata{IPv4Addr: "10.0.2.13", DeviceNumber: 1, RouteTableId: 2}
	w.ipamd.mu.Unlock()
	if err := w.k.AddNamespace(third.netns); err != nil {
		t.Fatal(err)
	}
	before, beforeNS := w.snap(t, hostileNode), w.snap(t, third.netns)
	conf := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "ipamdTimeout": "200ms", "stateDir": blocked}
	b, _ := json.Marshal(conf)
	_, err := w.p.Add(third.cmdArgs(b))
	wantCode(t, err, ErrSetupFailed)
	if after := w.snap(t, hostileNode); after.String() != before.String() {
		t.Fatalf("the node changed: %v", after.String())
	}
	if after := w.snap(t, third.netns); after.String() != beforeNS.String() {
		t.Fatalf("the pod namespace changed: %v", after.String())
	}
	if !slices.Contains(w.ipamd.released, "web-3") {
		t.Fatalf("the address was not returned to ipamd: %v", w.ipamd.released)
	}
}

// TestDelRecordOfAnotherPod: a record under the attachment's name that
// names another pod (the neighbour, its address and veth) is ignored: the
// DEL, which has nothing else, touches nothing of the neighbour's.
func TestDelRecordOfAnotherPod(t *testing.T) {
	w := newHostileWorld(t, hostileDriver(), 1)
	w.forget(victimName)
	rec, err := w.record(t)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := w.node.LinkByName(ownership.HostVeth("eni", "default", neighName))
	if err != nil {
		t.Fatal(err)
	}
	rec.PodName, rec.HostVeth, rec.HostVethIndex = neighName, nl.Name, nl.Index
	rec.IPs = []attachrec.IP{{Addr: netip.MustParseAddr(w.neigh.ip), Table: 2}}
	if err := w.store().Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.k.DeleteNamespace(w.victim.netns); err != nil {
		t.Fatal(err)
	}
	before, neighBefore := w.snap(t, hostileNode), w.snap(t, w.neigh.netns)
	args := w.victim.cmdArgs(hostileConf(t, w, w.format, nil))
	args.Netns = ""
	if err := w.p.Del(args); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	_, removed := kernel.Diff(before, w.snap(t, hostileNode))
	if lost := kernel.Minus(w.neigh.lines, kernel.Minus(w.neigh.lines, removed)); len(lost) > 0 {
		t.Fatalf("the neighbour lost %q", lost)
	}
	if after := w.snap(t, w.neigh.netns); after.String() != neighBefore.String() {
		t.Fatal("the neighbour's namespace changed")
	}
	if w.ipamd.proofs[victimName] == int32(nl.Index) {
		t.Fatal("the release offered the neighbour's veth as the sandbox's proof")
	}
}

// TestStateDirValidated: stateDir must be a clean absolute path (a
// relative one would depend on the runtime's working directory); anything
// else is code 7 naming the field, and the default is the CNI cache
// directory's neighbour.
func TestStateDirValidated(t *testing.T) {
	for _, bad := range []string{"var/lib/cni", "/var/lib/cni/", "/var/lib/../cni", "//var/lib", "/", "/var/lib/cni\n/x", "."} {
		_, err := LoadNetConf(netconf(t, map[string]any{"stateDir": bad}))
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Details, "stateDir") {
			t.Errorf("stateDir %q: %v, want code 7 naming stateDir", bad, err)
		}
	}
	c, err := LoadNetConf([]byte(`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni"}`))
	if err != nil || c.StateDir != defaultStateDir {
		t.Fatalf("default stateDir %q (%v), want %q", c.StateDir, err, defaultStateDir)
	}
	if DefaultStateDir != "/var/lib/cni/vpc-cni" {
		t.Fatalf("DefaultStateDir %q", DefaultStateDir)
	}
}
