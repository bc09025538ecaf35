package engine

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/spec"
)

func (r *run) event(ev spec.Event) error {
	switch {
	case ev.Add != nil:
		r.begin("add " + refNames(ev.Add))
		defer r.end()
		for _, ref := range ev.Add {
			if err := r.add(ref); err != nil {
				return err
			}
		}
	case ev.Delete != nil:
		r.begin("kubelet deletes " + names(ev.Delete))
		defer r.end()
		for _, n := range ev.Delete {
			if err := r.dropCachedResult(n, ev.WithoutPrevResult); err != nil {
				return err
			}
			if f := ev.ForgePrevResult; f != nil {
				if err := r.forgePrevResult(n, f); err != nil {
					return err
				}
			}
			if err := r.delete(n); err != nil {
				return err
			}
		}
	case ev.ForceDelete != nil:
		r.begin("force delete (grace period 0) " + strings.Join(ev.ForceDelete, ", "))
		defer r.end()
		for _, n := range ev.ForceDelete {
			p := r.pods[n]
			if r.podENI != nil {
				r.podENI.Delete(p.ns, p.name) // the API server no longer has the pod
			}
			p.noRetry = true
			if err := r.dropCachedResult(n, ev.WithoutPrevResult); err != nil {
				return err
			}
			if err := r.delete(n); err != nil {
				return err
			}
		}
	case ev.Evict != "":
		r.begin("autoscaler evicts aws-node")
		defer r.end()
		switch {
		case r.ipamd != nil:
			r.ipamd.Kill()
			r.ipamd = nil
			r.note("ipamd killed; its socket is left behind (connection refused)")
			r.markIpamdDown("evicted")
		case r.restartAt >= 0:
			r.restartAt = -1 // it had crashed: evicted, kubelet no longer restarts it
			r.note("aws-node, down after a crash, is evicted: it stays down")
		default:
			return notApplicable("aws-node is already evicted")
		}
	case ev.CancelEviction != "":
		r.begin("autoscaler cancels the eviction: aws-node starts, memory " + ev.Memory)
		defer r.end()
		if r.ipamd != nil {
			return notApplicable("aws-node is not evicted")
		}
		r.restartAt = -1
		r.badConfig = ev.BadConfig
		return r.startIpamd(memoryOf(ev))
	case ev.Restart != "":
		r.begin("ipamd crashes and restarts, checkpoint " + memoryOf(ev))
		defer r.end()
		if r.ipamd != nil {
			r.ipamd.Kill()
			r.ipamd = nil
			r.markIpamdDown("crashed")
		}
		r.badConfig = ev.BadConfig
		return r.startIpamd(memoryOf(ev))
	case ev.Failpoint != nil:
		f := ev.Failpoint
		r.begin(fmt.Sprintf("failpoint %s armed: %s on hit %d", f.Name, f.Action, f.Occurrence))
		defer r.end()
		r.restartMemory = memoryOf(spec.Event{Memory: f.Memory})
		return r.fp.Arm(failpoint.Name(f.Name), failpoint.Action(f.Action), f.Occurrence)
	case ev.EC2Fault != nil:
		f := ev.EC2Fault
		r.begin(fmt.Sprintf("EC2 fails the next %d %s calls with %s", f.Times, f.API, f.Code))
		defer r.end()
		r.cloud.InjectFault(f.API, memory.Fault{Code: f.Code, Times: f.Times})
	case ev.Wait != nil:
		r.begin("wait " + ev.Wait.String())
		defer r.end()
		r.advance(r.now + ev.Wait.Duration)
	case ev.Settle != nil:
		r.begin("settle")
		defer r.end()
		r.settle()
	case ev.LateDel != nil:
		r.begin("containerd's second DEL of an earlier sandbox arrives late: " + names(ev.LateDel))
		defer r.end()
		for _, n := range ev.LateDel {
			if err := r.lateDel(n); err != nil {
				return err
			}
		}
	case ev.RuntimeForgets != nil:
		r.begin("the runtime loses the sandboxes of " + names(ev.RuntimeForgets))
		defer r.end()
		for _, n := range ev.RuntimeForgets {
			if err := r.forget(n); err != nil {
				return err
			}
		}
	case ev.GC != nil:
		r.begin("the runtime runs CNI GC")
		defer r.end()
		return r.gc()
	}
	return nil
}

// names lists pod names, abbreviated past eight.
func names(ns []string) string {
	if len(ns) > 8 {
		return fmt.Sprintf("%s … %s (%d pods)", ns[0], ns[len(ns)-1], len(ns))
	}
	return strings.Join(ns, ", ")
}

// memoryOf is what a restarted ipamd finds of its checkpoint.
func memoryOf(ev spec.Event) string {
	if ev.Memory == "" {
		return "kept"
	}
	return ev.Memory
}

func refNames(refs []spec.PodRef) string {
	if len(refs) > 8 {
		return fmt.Sprintf("%s … %s (%d pods)", refs[0].Name, refs[len(refs)-1].Name, len(refs))
	}
	var n []string
	for _, r := range refs {
		if r.Node != "" {
			n = append(n, fmt.Sprintf("%s (node %s, address of %s)", r.Name, r.Node, r.ReuseIPOf))
		} else {
			n = append(n, r.Name)
		}
	}
	return strings.Join(n, ", ")
}

// add runs a sandbox (the runtime's RunPodSandbox → CNI ADD), or places a
// pod of another node on a deleted pod's address.
func (r *run) add(ref spec.PodRef) error {
	if ref.Node != "" {
		old := r.pods[ref.ReuseIPOf]
		if old.phase != deleted || !old.ip.IsValid() {
			// Only after a fault: the pod never got an address or is not
			// gone yet; the other node takes nothing of it.
			r.note("%s: %s is not a deleted pod with an address; nothing to reuse", ref.Name, ref.ReuseIPOf)
			return nil
		}
		if !r.moveAway(old.ip) {
			return nil
		}
		r.remote[old.ip] = ref.Name + " on another node"
		r.note("%s on node %s now holds %s (was %s's)", ref.Name, ref.Node, old.ip, ref.ReuseIPOf)
		return nil
	}
	p := r.pods[ref.Name]
	if p.phase == running || p.phase == terminating {
		// Only after a fault: kubelet's retry already ran the sandbox.
		r.note("%s is already running", ref.Name)
		return nil
	}
	p.incarnation++
	p.containerID = sandboxID(p, p.incarnation)
	// An absolute path, as a runtime names it (GC opens the one ipamd
	// recorded only if it is one).
	p.netns = fmt.Sprintf("/var/run/netns/pod-%s-%s-%d", p.ns, p.name, p.incarnation)
	p.ip, p.hostVeth, p.attempts = netip.Addr{}, "", 0
	if err := r.kern.AddNamespace(p.netns); err != nil {
		return err
	}
	p.vlan, p.noRetry, p.forgotten = 0, false, false
	if r.podENI != nil {
		r.giveBranchENI(p)
	}
	res, err := r.cni.AddNetworkList(bg(), r.list, r.rtConf(p, p.netns))
	if err != nil {
		if !p.quiet {
			r.note("t=%s ADD %s failed: %v; the runtime tears the sandbox down, kubelet retries", r.now, ref.Name, err)
		}
		p.phase, p.wantRun = pending, true
		r.movedPods()
		r.mark(Mark{Kind: MarkAdd, Pod: ref.Name, Text: err.Error()})
		derr := r.del(p, p.netns)
		r.markDel(ref.Name, derr)
		if derr != nil {
			// A sandbox whose network it could not tear down the runtime
			// keeps, not ready, with its namespace; kubelet stops it again
			// (retried with back-off) before it runs the pod's next one.
			r.note("DEL after failed ADD: %s; the runtime keeps the sandbox (not ready), kubelet stops it before it runs another",
				r.delOutcome(derr))
			p.phase, p.attempts, p.nextRetry = terminating, 1, r.now+time.Second
			r.movedPods()
			return nil
		}
		r.kern.DeleteNamespace(p.netns)
		// The failed sandbox is removed later (RemovePodSandbox): one more
		// DEL, its namespace gone, no prevResult.
		if derr := r.del(p, ""); derr != nil {
			r.note("second DEL of the failed sandbox: %s", r.delOutcome(derr))
		}
		return nil
	}
	p.wantRun = false
	r.movedPods()
	cur, err := current.NewResultFromResult(res)
	if err != nil || len(cur.IPs) == 0 || len(cur.Interfaces) == 0 {
		return fmt.Errorf("ADD %s: unusable result %v (%v)", ref.Name, res, err)
	}
	p.ip, _ = netip.AddrFromSlice(cur.IPs[0].Address.IP)
	p.ip = p.ip.Unmap()
	p.hostVeth = cur.Interfaces[0].Name
	if last := cur.Interfaces[len(cur.Interfaces)-1]; last.Sandbox != "" {
		if d, err := strconv.Atoi(last.Sandbox); err == nil && d != p.device && p.vlan == 0 {
			if r.mode == "ipv4" && !p.unpinned {
				r.note("%s asked for device %d, ipamd gave device %d", ref.Name, p.device, d)
			}
			p.device = d // IPv6: every address is the primary ENI's
		}
	}
	p.phase = running
	r.movedPods()
	if r.onHold != nil {
		r.onHold(ref.Name, p, true)
	}
	r.mark(Mark{Kind: MarkAdd, Pod: ref.Name, IP: p.ip.String(), HostVeth: p.hostVeth, Vlan: p.vlan, OK: true})
	if p.quiet {
		return nil
	}
	if p.vlan != 0 {
		r.note("ADD %s -> %s (branch ENI, VLAN %d, host veth %s)", ref.Name, p.ip, p.vlan, p.hostVeth)
	} else {
		r.note("ADD %s -> %s (device %d, host veth %s)", ref.Name, p.ip, p.device, p.hostVeth)
	}
	return nil
}

func (r *run) rtConf(p *pod, netns string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: netns, IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", p.name},
		{"K8S_POD_INFRA_CONTAINER_ID", p.containerID}, {"K8S_POD_UID", "uid-" + p.containerID}}}
}

// delete is kubelet deleting a pod: StopPodSandbox (CNI DEL with the
// cached result as prevResult), retried with back-off on failure.
func (r *run) delete(name string) error {
	p := r.pods[name]
	if p.wantRun && (p.phase == pending || p.phase == terminating) {
		// Its sandbox never came up (a failed ADD): deleting the pod only
		// stops kubelet's retries (of the ADD; a failed sandbox the runtime
		// kept is still stopped).
		p.wantRun = false
		r.movedPods()
		r.note("%s never ran: kubelet stops retrying its sandbox", name)
		return nil
	}
	if p.phase != running {
		return notApplicable(name + " is not running")
	}
	p.phase = terminating
	r.movedPods()
	if r.onHold != nil {
		r.onHold(name, p, false)
	}
	p.attempts = 0
	r.tryDel(name, p)
	return nil
}

func (r *run) tryDel(name string, p *pod) {
	r.checkClock("DEL " + name)
	p.attempts++
	defer r.stepCheck(fmt.Sprintf("DEL %s attempt %d", name, p.attempts))
	err := r.del(p, p.netns)
	r.markDel(name, err)
	what := r.delOutcome(err)
	if err == nil {
		r.note("t=%s DEL %s attempt %d: %s", r.now, name, p.attempts, what)
		r.removeSandbox(name, p)
		return
	}
	if p.attempts > r.s.Node.KubeletRetries || p.noRetry {
		r.note("t=%s DEL %s attempt %d: %s; kubelet gives up and the runtime removes the sandbox", r.now, name, p.attempts, what)
		r.removeSandbox(name, p)
		return
	}
	backoff := time.Second << (p.attempts - 1)
	p.nextRetry = r.now + backoff
	r.note("t=%s DEL %s attempt %d: %s; kubelet retries in %s", r.now, name, p.attempts, what, backoff)
}

// del runs a CNI DEL through libcni (netns "" as the runtime's second DEL
// sends it), the plugin's trace of it then in r.exec.last.
func (r *run) del(p *pod, netns string) error {
	r.exec.last = nil
	return r.cni.DelNetworkList(bg(), r.list, r.rtConf(p, netns))
}

// delOutcome says what the DEL just run did: ipamd's answer, the
// teardowns, and what it returned; libcni's error when the plugin did not
// get to run it.
func (r *run) delOutcome(err error) string {
	if t := r.exec.last; t != nil {
		return t.String()
	}
	if err != nil {
		return fmt.Sprintf("failed: %v", err)
	}
	return "ok"
}

// removeSandbox is RemovePodSandbox: the namespace goes (and with it the
// veth pair and its routes, not its rules), then the runtime's second DEL
// with an empty netns and, the cache being gone after a successful DEL, no
// prevResult.
func (r *run) removeSandbox(name string, p *pod) {
	if err := r.kern.DeleteNamespace(p.netns); err != nil {
		r.note("remove namespace %s: %v", p.netns, err)
	}
	// Only a second DEL that did something, or failed, is worth a line.
	if err := r.del(p, ""); err != nil || r.exec.last != nil && r.exec.last.tornDown {
		r.note("second DEL %s (empty netns): %s%s", name, r.delOutcome(err), map[bool]string{true: " (the runtime ignores the error)"}[err != nil])
	}
	p.phase = deleted
	r.movedPods()
	r.gone = append(r.gone, r.invPod(name, p))
}

// dropCachedResult removes libcni's cached ADD result of the pod, so the
// DEL carries no prevResult. libcni exports no way to drop one, so this
// knows its cache layout (results/<network>-<container>-<ifname>); a
// missing file fails the run rather than silently keeping the prevResult.
func (r *run) dropCachedResult(name string, drop bool) error {
	p := r.pods[name]
	if !drop || p.phase != running {
		return nil // a pod that never ran has no cached result
	}
	path := filepath.Join(r.tmp, "cni-cache", "results", fmt.Sprintf("%s-%s-%s", r.list.Name, p.containerID, "eth0"))
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("drop the cached result of %s (libcni's cache layout changed?): %w", name, err)
	}
	r.note("the DEL of %s races its ADD: the runtime has no cached result, so no prevResult", name)
	return nil
}

// movedPods notes that a pod's phase changed, or that a pod was added:
// every such change is followed by a call, so that what was read of the
// pods before it is known to be stale.
func (r *run) movedPods() { r.podsVer++ }
