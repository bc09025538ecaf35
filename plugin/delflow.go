package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// Delete is vpccni's delete flow (docs/architecture.md#the-delete-flow):
//
//  1. Gather, releasing nothing, what the sandbox had: the prevResult (when
//     it could be read), the attachment's node-local record (written by
//     ADD), ipamd's record of this attachment (vpccni's ipamd answers
//     without releasing), and, when none names anything, the pod's
//     namespace read back.
//  2. Tear all of it down. The node, not the source, decides what is a
//     pod's: a prevResult naming an address the node does not show to be
//     one is set aside and the teardown redone from the other sources;
//     then, the same way, the attachment record.
//  3. Release the address, unless the kernel routes one of the sandbox's
//     addresses to a veth nothing proves is the sandbox's: it then stays
//     allocated (ipamd's reconciler frees it once that veth is gone).
//  4. What only ipamd's release reply names (a reference ipamd, which
//     cannot be asked without releasing) is torn down after it.
//
// No ipamd outcome stops a teardown; a failed teardown fails the DEL
// (code 11) and keeps the address, so the retry finds it. A prevResult
// that could not be read, or a prevResult or record the node
// contradicted, fails the DEL
// with code 7 once everything provable is done, and the operator learns
// of the bad cache; the retry, which finds nothing left and nothing held
// by ipamd, succeeds.
//
// The attachment's node-local record (plugin/attachrec) is removed once
// the DEL succeeds and kept for the retry when it fails; one that cannot
// be read is renamed aside (readRecord) and the DEL goes on without it.
func (p *Plugin) Delete(r *DelRequest) error {
	p.readRecord(r)
	err := p.deleteFlow(r)
	if err == nil {
		p.forgetRecord(r.inv)
	}
	return err
}

func (p *Plugin) deleteFlow(r *DelRequest) error {
	log := r.inv.log
	evidence := r.StateErr
	known, asked, hold := p.lookupWhileReading(r)
	defer hold.Close() // the release rides on the lookup's connection
	pod, source := p.gather(r, known, asked)
	rep, err := p.teardown(r, pod, asked)
	var notPod *driver.NotPodAddressError
	if errors.As(err, &notPod) && r.State != nil {
		// The node contradicts the prevResult: nothing of it was touched.
		log.Error("the node contradicts the prevResult; tearing down from the other sources alone", "error", err)
		evidence = badPrev("%v", err)
		r.State = nil
		pod, source = p.gather(r, known, asked)
		rep, err = p.teardown(r, pod, asked)
	}
	if errors.As(err, &notPod) && r.Record != nil {
		// Then the record, the same way: a record is a claim too.
		log.Error("the node contradicts the attachment's record; tearing down from ipamd's record and the pod namespace alone", "error", err)
		if evidence == nil {
			evidence = badRecord(err)
		}
		r.Record = nil
		pod, source = p.gather(r, known, asked)
		rep, err = p.teardown(r, pod, asked)
	}
	if err != nil {
		log.Error("teardown failed; keeping the address in ipamd so the retry finds it", "source", source, "removed", rep.Removed,
			"notes", rep.Notes, "error", err)
		return teardownError(source, err)
	}
	if pod != nil {
		log.Info("torn down", "source", source, "removed", rep.Removed, "skipped", rep.Skipped, "notes", rep.Notes)
	}
	if held := heldElsewhere(rep, known, asked); len(held) > 0 {
		log.Warn("not releasing: the kernel routes the sandbox's address to a veth that nothing proves is its own; "+
			"ipamd keeps it until that veth is gone", "addresses", held, "skipped", rep.Skipped)
		return evidence
	}
	reply, out, rerr := p.Release(r)
	if r.leftVeth && (rerr != nil || !reply.GetHostVethTaken()) {
		// ipamd did not take the veth pair: it goes now, before the
		// address can be released anywhere (queued, or by a reconciler).
		if err := p.deleteLeftVeth(r, pod); err != nil {
			log.Error("ipamd did not take the pod's veth and deleting it failed; the runtime must retry", "outcome", out, "error", err)
			return err
		}
	}
	switch {
	case out == OutcomeUnknownPod:
		p.forgetQueued(r)
		log.Info("ipamd holds no address for the pod (unknown pod): nothing to release; the pod is torn down", "outcome", out)
	case rerr != nil && pod == nil && (out == OutcomeUnreachable || out == OutcomeTimeout):
		// Nothing named the pod's objects, and ipamd, which may know some
		// (a branch pod's VLAN), could not be asked: success would leave
		// whatever they are for good.
		log.Warn("ipamd is unreachable and nothing else names the pod's network; the runtime must retry once ipamd is back",
			"outcome", out, "error", rerr)
		return cniError(types.ErrTryAgainLater, "ipamd is unreachable and nothing else names the pod's network, retry", rerr)
	case rerr != nil && out != OutcomeRefused:
		queued, qerr := p.queueRelease(r, pod, known)
		switch {
		case qerr != nil:
			// Success would leave the address to the reconciler's
			// judgement; the retry may reach ipamd or the queue.
			log.Error("ipamd did not release the address and the release could not be queued; the runtime must retry",
				"outcome", out, "error", rerr, "queueError", qerr)
			return cniError(types.ErrTryAgainLater, "the pod is torn down, but ipamd did not release its address and the release queue refused it, retry",
				errors.Join(rerr, qerr))
		case queued:
			log.Warn("ipamd did not release the address: the pod is torn down and the release is queued; ipamd releases it when it starts",
				"outcome", out, "error", rerr)
		default:
			log.Warn("ipamd did not release the address: the pod is torn down, the address stays allocated in ipamd until ipamd forgets or reconciles it",
				"outcome", out, "error", rerr)
		}
	case rerr != nil:
		log.Warn("ipamd refused the release: the pod is torn down, the address stays allocated in ipamd until ipamd forgets or reconciles it",
			"outcome", out, "error", rerr)
	default:
		p.forgetQueued(r)
		if err := p.teardownReplyOnly(r, reply, pod); err != nil {
			return err
		}
	}
	if evidence != nil && len(rep.Removed) == 0 && out == OutcomeUnknownPod {
		// A DEL that fails for ever wedges the runtime: it keeps the
		// sandbox's cached result, and libcni's GC stops at it, so no
		// other lost sandbox is collected either.
		log.Warn("the prevResult is unusable, but nothing of the sandbox is left on the node and ipamd holds nothing for it: "+
			"success, so that the runtime lets the sandbox go (the DEL that tore it down reported the prevResult)", "prevResult", evidence)
		return nil
	}
	return evidence
}

// gather is what to tear down, releasing nothing: the prevResult's pod
// with every address the attachment's record and ipamd's record add, and the pod namespace read back
// when ipamd could not be asked or keeps no record of the pod (a branch
// pod) — a prevResult may omit an address: only ipamd or the namespace can
// say — or when nothing else names anything. An
// address the namespace shows that the node does not show to be a pod's
// (a branch ENI's, before anything ties it to its VLAN) is left to ipamd's
// release reply, which names its VLAN. nil: nothing is known.
func (p *Plugin) gather(r *DelRequest, known *driver.Pod, asked bool) (*driver.Pod, string) {
	var pod *driver.Pod
	var sources []string
	add := func(q *driver.Pod, source string) {
		switch {
		case q == nil:
			return
		case pod == nil:
			c := *q
			c.IPs = slices.Clone(q.IPs)
			pod = &c
		case (pod.Branch == nil && q.Branch == nil) || (pod.Branch != nil && q.Branch != nil && pod.Branch.VlanID == q.Branch.VlanID):
			pod.IPs = append(pod.IPs, missingIPs(q.IPs, pod.IPs)...)
		default:
			return // a branch pod is one VLAN: its first source says which
		}
		sources = append(sources, source)
	}
	if r.State != nil {
		add(&r.State.Pod, "prevResult")
	}
	add(r.Record, "attachment record")
	add(known, "ipamd's record")
	// ipamd keeps no record of a branch pod: its namespace is the only
	// other witness of its address.
	if r.Pod != nil && (pod == nil || !asked || pod.Branch != nil) {
		add(p.inspect(r), "pod namespace")
	}
	return pod, strings.Join(sources, " and ")
}

// inspect reads the pod's network back from its namespace (the driver
// keeps only what the node shows to be a pod's).
func (p *Plugin) inspect(r *DelRequest) *driver.Pod {
	pod, err := p.env.Driver.Inspect(r.Host, r.Pod, r.inv.args.IfName)
	if err != nil {
		r.inv.log.Warn("cannot read the pod's network back from its namespace", "error", err)
		return nil
	}
	return pod
}

func (p *Plugin) teardown(r *DelRequest, pod *driver.Pod, asked bool) (driver.Report, error) {
	if pod == nil {
		return driver.Report{}, nil
	}
	q := *pod
	// The veth pair is left for ipamd when vpccni's ipamd answered (a
	// reference ipamd would release the address without deleting it) and
	// the sandbox proved which host veth is its own.
	r.leftVeth = asked && q.Branch == nil && r.Pod != nil && r.HostVethIndex > 0
	q.LeaveVeth = r.leftVeth
	q.Node, r.node = r.node, nil // read for the first teardown only
	return p.env.Driver.Teardown(r.Host, r.Pod, q)
}

// deleteLeftVeth deletes the veth pair a teardown left for ipamd, when
// ipamd did not take it: the teardown again, which finds nothing else.
func (p *Plugin) deleteLeftVeth(r *DelRequest, pod *driver.Pod) error {
	r.leftVeth = false
	rep, err := p.env.Driver.Teardown(r.Host, r.Pod, *pod)
	if err != nil {
		return teardownError("pod namespace", err)
	}
	r.inv.log.Info("deleted the veth pair ipamd did not take", "removed", rep.Removed)
	return nil
}

// teardownReplyOnly tears down the addresses ipamd's release reply names
// that nothing before it did: a reference ipamd cannot be asked without
// releasing, and a DEL without a prevResult then has only its reply.
func (p *Plugin) teardownReplyOnly(r *DelRequest, reply *rpc.DelNetworkReply, done *driver.Pod) error {
	extra, err := p.PodFromDelReply(r, reply)
	if err != nil || extra == nil {
		if err != nil {
			r.inv.log.Warn("ignoring ipamd's reply", "error", err)
		}
		return nil
	}
	if done != nil {
		extra.IPs = missingIPs(extra.IPs, done.IPs)
	}
	if len(extra.IPs) == 0 {
		return nil
	}
	rep, err := p.env.Driver.Teardown(r.Host, r.Pod, *extra)
	if err != nil {
		return teardownError("ipamd's reply", err)
	}
	r.inv.log.Info("torn down addresses only ipamd's release reply named", "removed", rep.Removed, "skipped", rep.Skipped)
	return nil
}

// heldElsewhere are the sandbox's addresses (by ipamd's record, or any
// when ipamd could not be asked) that the teardown left because the kernel
// routes them to another veth.
func heldElsewhere(rep driver.Report, known *driver.Pod, asked bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range rep.Moved {
		if !asked || (known != nil && slices.ContainsFunc(known.IPs, func(ip driver.PodIP) bool { return ip.Addr == a })) {
			out = append(out, a)
		}
	}
	return out
}

// lookupWhileReading is lookup, with the node read meanwhile (the
// driver's ReadNode) for the addresses the prevResult and the record
// name: neither changes anything, ipamd's answer is most of a DEL's wait,
// and the reading, a rule dump of every pod's rules, grows with the node.
// The reading is r.node, for the first teardown (which reads again if the
// pod turns out to have other addresses, or if the reading failed).
func (p *Plugin) lookupWhileReading(r *DelRequest) (known *driver.Pod, asked bool, hold io.Closer) {
	var addrs []netip.Addr
	for _, q := range []*driver.Pod{r.statePod(), r.Record} {
		for _, ip := range q.GetIPs() {
			if !slices.Contains(addrs, ip.Addr) {
				addrs = append(addrs, ip.Addr)
			}
		}
	}
	if len(addrs) == 0 {
		return p.lookup(r)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		known, asked, hold = p.lookup(r)
	}()
	node, err := p.env.Driver.ReadNode(r.Host, addrs)
	if err != nil {
		r.inv.log.Debug("cannot read the node ahead of the teardown; the teardown reads it", "error", err)
	}
	r.node = node
	<-done
	return known, asked, hold
}

// lookup asks ipamd what it holds for this attachment, without releasing
// it. asked is false when ipamd could not answer (unreachable, a reference
// ipamd without the call): the flow then cannot tell. The connection is
// the caller's to close (hold), after its release.
func (p *Plugin) lookup(r *DelRequest) (known *driver.Pod, asked bool, hold io.Closer) {
	inv, _, closer, err := p.env.DialInventory(r.inv.conf.IpamdAddress)
	if err != nil {
		return nil, false, io.NopCloser(nil)
	}
	known, asked = p.listHeld(r, inv)
	return known, asked, closer
}

// listHeld is lookup's question: ipamd's allocations of this attachment.
func (p *Plugin) listHeld(r *DelRequest, inv rpc.InventoryClient) (*driver.Pod, bool) {
	ctx, cancel := r.inv.ipamdContext(context.Background())
	defer cancel()
	list, err := inv.ListAllocations(ctx, &rpc.ListAllocationsRequest{NetworkName: r.inv.conf.Name,
		ContainerId: r.inv.args.ContainerID, IfName: r.inv.args.IfName, PodNamespace: r.inv.podNS, PodName: r.inv.podName,
		HostVethIndex: int32(r.HostVethIndex)})
	if err != nil {
		if status.Code(err) != codes.Unimplemented {
			r.inv.log.Info("ipamd cannot say what the sandbox holds", "outcome", Classify(err), "error", err)
		}
		return nil, false
	}
	var ips []driver.PodIP
	for _, a := range list.GetAllocations() {
		mine := a.GetContainerId() == r.inv.args.ContainerID && a.GetIfName() == r.inv.args.IfName
		// A recovered allocation names the pod's host veth: it is this
		// sandbox's when its veth is the one the sandbox proved it has.
		recovered := a.GetRecovered() && r.HostVethIndex != 0 && int(a.GetHostVethIndex()) == r.HostVethIndex &&
			ownership.HasPodSuffix(a.GetContainerId(), r.inv.podNS, r.inv.podName)
		if !mine && !recovered {
			continue // an older ipamd that does not filter
		}
		ip, err := netip.ParseAddr(a.GetIp())
		table := int(a.GetRouteTable())
		if err != nil || !ownership.ValidPodAddr(ip) || !ownership.IsPodTable(table) {
			r.inv.log.Warn("ignoring ipamd's record", "ip", a.GetIp(), "table", table)
			continue
		}
		ips = append(ips, driver.PodIP{Addr: ip, Table: table})
	}
	if len(ips) == 0 {
		return nil, true
	}
	return &driver.Pod{HostVeth: ownership.HostVeth(r.inv.conf.VethPrefix, r.inv.podNS, r.inv.podName),
		ContainerIf: r.inv.args.IfName, IPs: ips}, true
}

func missingIPs(have, known []driver.PodIP) []driver.PodIP {
	var out []driver.PodIP
	for _, h := range have {
		if !slices.ContainsFunc(known, func(k driver.PodIP) bool { return k.Addr == h.Addr }) {
			out = append(out, h)
		}
	}
	return out
}

// teardownError is a failed teardown as the runtime sees it. A source that
// names an address the node does not show to be a pod's (a confused
// ipamd, a prevResult the flow could not set aside) is refused with code
// 7, naming what the node says instead; any other failure is code 11: the
// runtime retries the DEL.
func teardownError(source string, err error) error {
	var notPod *driver.NotPodAddressError
	if errors.As(err, &notPod) {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("the %s names an address this node does not show to be a pod's", source), err.Error())
	}
	return cniError(types.ErrTryAgainLater, "pod teardown incomplete, retry", err)
}
