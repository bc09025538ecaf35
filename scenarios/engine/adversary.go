package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/scenarios/spec"
)

// The adversary's moves beyond the incident's: rules of another agent on
// the node, a forged prevResult, containerd's second DEL of an old sandbox
// arriving late, a runtime that loses its sandboxes, CNI GC, and ADDs slow
// enough for ipamd's loops to run in the middle of one.

// plantForeignRules adds the scenario's foreign rules to the node.
func (r *run) plantForeignRules() error {
	for i, fr := range r.s.Node.ForeignRules {
		from, to, err := fr.Selectors()
		if err != nil {
			return err
		}
		rule := kernel.Rule{Priority: fr.Priority, Table: fr.Table, Family: kernel.FamilyV4}
		for _, sel := range []struct {
			p   netip.Prefix
			dst **net.IPNet
		}{{from, &rule.Src}, {to, &rule.Dst}} {
			if sel.p.IsValid() {
				*sel.dst = ownership.IPNet(sel.p)
				if sel.p.Addr().Is6() {
					rule.Family = kernel.FamilyV6
				}
			}
		}
		if err := r.node.RuleAdd(rule); err != nil {
			return fmt.Errorf("node.foreignRules[%d] %s: %w", i, kernel.RuleString(rule), err)
		}
		r.foreign = append(r.foreign, rule)
		r.note("another agent's rule: %s", kernel.RuleString(rule))
	}
	return nil
}

// ipamdTiming is the scenario's reconcile grace and interval for ipamd
// (zero: ipamd's defaults; "minimum": the shortest ipamd accepts).
func (r *run) ipamdTiming() (grace, interval time.Duration) {
	set := r.s.Node.Ipamd
	if set == nil {
		return 0, 0
	}
	parse := func(v string, min time.Duration) time.Duration {
		if v == spec.Minimum {
			return min
		}
		d, _ := time.ParseDuration(v) // spec validated it
		return d
	}
	return parse(set.ReconcileGrace, ipamd.ReconcileGraceRange.Min), parse(set.ReconcileInterval, ipamd.ReconcileIntervalRange.Min)
}

// lateDel sends containerd's second DEL of the pod's previous sandbox: the
// one before the running one, or the last one if none runs.
func (r *run) lateDel(name string) error {
	p := r.pods[name]
	n := p.incarnation
	if p.phase == running || p.phase == terminating {
		n--
	}
	if n < 1 {
		return notApplicable("late-del " + name + ": the pod has no earlier sandbox")
	}
	old := *p
	old.containerID = sandboxID(p, n)
	err := r.del(&old, "")
	r.markDel(name, err)
	r.note("t=%s late second DEL of %s's sandbox %s (empty netns, no prevResult): %s", r.now, name, old.containerID, r.delOutcome(err))
	return nil
}

func sandboxID(p *pod, incarnation int) string {
	return fmt.Sprintf("sandbox-%s-%d", p.name, incarnation)
}

// forgePrevResult rewrites the runtime's cached ADD result of the pod as
// the forgery says, so the DEL's prevResult carries the lie.
func (r *run) forgePrevResult(name string, f *spec.Forgery) error {
	p := r.pods[name]
	if p.phase != running {
		return nil
	}
	path := filepath.Join(r.tmp, "cni-cache", "results", fmt.Sprintf("%s-%s-%s", r.list.Name, p.containerID, "eth0"))
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("forge the cached result of %s (libcni's cache layout changed?): %w", name, err)
	}
	var cached map[string]any
	if err := json.Unmarshal(b, &cached); err != nil {
		return err
	}
	res, ok := cached["result"].(map[string]any)
	if !ok {
		return fmt.Errorf("the cached result of %s has no result", name)
	}
	if f.Table != 0 {
		if itfs, ok := res["interfaces"].([]any); ok && len(itfs) > 1 {
			if itf, ok := itfs[1].(map[string]any); ok {
				itf["mac"] = strconv.Itoa(f.Table)
			}
		}
	}
	if len(f.IPs) > 0 {
		var ips []any
		for _, a := range f.IPs {
			ips = append(ips, map[string]any{"interface": 1, "address": a})
		}
		res["ips"] = ips
	}
	out, err := json.Marshal(cached)
	if err != nil {
		return err
	}
	r.note("the runtime's cached result of %s is forged: table %d, ips %v", name, f.Table, f.IPs)
	return os.WriteFile(path, out, 0o600)
}

// forget is a runtime that lost the pod's sandbox (containerd restarted
// without its state): no DEL, the namespace stays, libcni's cache of it is
// gone, and the pod no longer runs as far as anyone but the kernel knows.
func (r *run) forget(name string) error {
	p := r.pods[name]
	if p.phase != running {
		return notApplicable("runtime-forgets " + name + ": it does not run")
	}
	path := filepath.Join(r.tmp, "cni-cache", "results", fmt.Sprintf("%s-%s-%s", r.list.Name, p.containerID, "eth0"))
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	p.phase = deleted
	p.forgotten = true
	r.movedPods()
	if r.onHold != nil {
		r.onHold(name, p, false)
	}
	lost := r.invPod(name, p)
	lost.Netns = "" // the runtime no longer knows it: nobody removes it
	// Until a GC runs, nothing tells the node the sandbox is gone: its
	// objects are pending, neither required nor a leak.
	r.lost = append(r.lost, lost)
	r.note("the runtime lost the sandbox %s of %s: no DEL, its namespace %s stays", p.containerID, name, p.netns)
	return nil
}

// gc is the runtime's CNI GC: every running sandbox is a valid attachment.
func (r *run) gc() error {
	var valid []types.GCAttachment
	names := make([]string, 0, len(r.pods))
	for n := range r.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if p := r.pods[n]; p.phase == running || p.phase == terminating {
			valid = append(valid, types.GCAttachment{ContainerID: p.containerID, IfName: "eth0"})
		}
	}
	err := r.cni.GCNetworkList(bg(), r.gcList, &libcni.GCArgs{ValidAttachments: valid})
	if err != nil {
		// The runtime runs GC again later: the lost sandboxes stay pending.
		r.note("t=%s GC (%d valid attachments): failed: %v", r.now, len(valid), err)
		return nil
	}
	// GC succeeded: what it was told is gone must be.
	r.gone = append(r.gone, r.lost...)
	r.lost = nil
	r.note("t=%s GC (%d valid attachments): ok", r.now, len(valid))
	return nil
}

// slowAdds makes every AddNetwork answered with an address take the pod's
// addTakes before the plugin goes on (ipamd's loops run meanwhile).
func (r *run) slowAdds(inner plugin.Dialer) plugin.Dialer {
	return func(target string) (rpc.CNIBackendClient, io.Closer, error) {
		c, closer, err := inner(target)
		if err != nil {
			return nil, nil, err
		}
		return slowBackend{c, r}, closer, nil
	}
}

type slowBackend struct {
	rpc.CNIBackendClient
	r *run
}

func (b slowBackend) AddNetwork(ctx context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	reply, err := b.CNIBackendClient.AddNetwork(ctx, in)
	if err == nil && reply.GetSuccess() {
		if p := b.r.pods[in.GetK8S_POD_NAMESPACE()+"/"+in.GetK8S_POD_NAME()]; p != nil && p.spec.AddTakes != nil {
			b.r.pause(p.spec.AddTakes.Duration)
		}
	}
	return reply, err
}

// pause lets d of simulated time pass in the middle of an ADD: only
// ipamd's loops run (kubelet's work waits for the ADD to return).
func (r *run) pause(d time.Duration) {
	end := r.now + d
	r.pausing = true
	defer func() { r.pausing = false }()
	for r.ipamd != nil && r.nextGridTick() <= end {
		r.setNow(r.nextGridTick()) // (never back: idle ticks may have been skipped)
		r.tickIpamd()
	}
	r.setNow(end)
}

// inapplicable is an event the pods' or ipamd's state does not allow (a
// delete of a pod that does not run). A scenario file with one is wrong
// and its run fails; a generated timeline, which cannot foresee every
// fault's effect, has it noted and goes on (Options.Tolerant).
type inapplicable struct{ msg string }

func (e inapplicable) Error() string { return e.msg }

func notApplicable(msg string) error { return inapplicable{msg} }

// moveAway is EC2 giving an address of this node to another node's pod:
// only one that this node's ipamd gives back can go (it leaves the pool,
// and the ENI, so that no later ipamd here hands it out again): one it
// does not hold, and only while it runs (nothing else on the node returns
// addresses to EC2). An IPv6 address is part of a delegated prefix and
// cannot move alone.
func (r *run) moveAway(ip netip.Addr) bool {
	if !ip.Is4() {
		return true
	}
	if r.ipamd == nil {
		r.note("%s cannot move to another node: ipamd, which alone gives addresses back to EC2, is down", ip)
		return false
	}
	if err := r.ipamd.Datastore().GiveBack(ip); err != nil {
		r.note("%s cannot move to another node yet: %v", ip, err)
		return false
	}
	inst, err := r.cloud.Instance(bg())
	if err != nil {
		r.note("%s: %v", ip, err)
		return true
	}
	for _, e := range inst.ENIs {
		if slices.Contains(e.IPv4, ip) {
			_, err := r.cloud.UnassignPrivateIpAddresses(bg(), &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: &e.ID,
				PrivateIpAddresses: []string{ip.String()}})
			if err != nil {
				r.note("EC2 keeps %s on %s: %v", ip, e.ID, err)
			}
		}
	}
	return true
}
