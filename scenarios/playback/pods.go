package playback

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// Pod states at the end of a replay.
const (
	// Live: the last ADD succeeded and no DEL or GC followed.
	StateLive = "live"
	// Deleted: the last DEL succeeded, or GC collected the attachment.
	StateDeleted = "deleted"
	// Pending: the last ADD or DEL failed; the runtime retries the DEL,
	// so the pod's objects are neither required nor a leak yet.
	StatePending = "pending"
)

// Pod is one attachment (container ID and interface) the journal names.
type Pod struct {
	Name        string   `json:"name,omitempty"`
	ContainerID string   `json:"containerID"`
	IfName      string   `json:"ifName"`
	State       string   `json:"state"`
	IPs         []string `json:"ips,omitempty"`
	HostVeth    string   `json:"hostVeth,omitempty"`
}

// Accounting is ipamd's side as its recorded answers tell it.
type Accounting struct {
	Assigned int `json:"assigned"`
	Released int `json:"released"`
	// Forgotten are addresses ipamd answered "unknown pod" for: it had
	// lost its record of them (a restart without its checkpoint).
	Forgotten int    `json:"forgotten"`
	Held      []Held `json:"held,omitempty"`
}

// Held is an address ipamd still holds at the end of the journal.
type Held struct {
	IP    string `json:"ip"`
	Pod   string `json:"pod"`
	State string `json:"state"`
}

type podRec struct {
	Pod
	netns, vethPrefix string
	// resultFormat is the netconf's: how its results carry the cleanup state.
	resultFormat string
	strict       bool
	cleanup      *plugin.CleanupState
}

type podID struct {
	key, name, ns, pod string
}

type pods struct {
	byKey map[string]*podRec
	order []string
	// alloc is ipamd's holding per attachment key, from its answers.
	alloc                         map[string][]string
	assigned, released, forgotten int
	// current is the attachment of the step being replayed; valid the
	// attachments a GC's runtime listed as valid; collected those the GC
	// released.
	current   string
	valid     map[string]bool
	collected []string
	bad       []invariant.Violation
}

func newPods() *pods { return &pods{byKey: map[string]*podRec{}, alloc: map[string][]string{}} }

func key(containerID, ifName string) string { return containerID + "/" + ifName }

func (ps *pods) identify(e *journal.Entry) podID {
	id := podID{key: key(e.Env.ContainerID, e.Env.IfName)}
	if a, err := plugin.LoadK8sArgs(e.Env.Args); err == nil {
		id.ns, id.pod = string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)
		if id.ns != "" || id.pod != "" {
			id.name = id.ns + "/" + id.pod
		}
	}
	return id
}

func (ps *pods) get(id podID, e *journal.Entry) *podRec {
	p, ok := ps.byKey[id.key]
	if !ok {
		p = &podRec{Pod: Pod{Name: id.name, ContainerID: e.Env.ContainerID, IfName: e.Env.IfName}}
		ps.byKey[id.key] = p
		ps.order = append(ps.order, id.key)
	}
	if p.Name == "" {
		p.Name = id.name
	}
	if e.Env.Netns != "" {
		p.netns = e.Env.Netns
	}
	return p
}

// begin readies the accounting for one step.
func (ps *pods) begin(k string, e *journal.Entry) {
	ps.current, ps.valid, ps.collected = k, nil, nil
	if e.Env.Command != "GC" {
		return
	}
	var conf struct {
		Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
	}
	if json.Unmarshal(e.Stdin, &conf) != nil {
		return
	}
	ps.valid = map[string]bool{}
	for _, a := range conf.Valid {
		ps.valid[key(a.ContainerID, a.IfName)] = true
	}
}

// goneAtGC lists the namespaces of the attachments a GC's runtime did not
// list as valid.
func (ps *pods) goneAtGC() []string {
	var out []string
	for _, k := range ps.order {
		if p := ps.byKey[k]; !ps.valid[k] && p.netns != "" {
			out = append(out, p.netns)
		}
	}
	return out
}

// apply moves an attachment along after its invocation.
func (ps *pods) apply(id podID, e *journal.Entry, result json.RawMessage, ce *types.Error) {
	switch e.Env.Command {
	case "GC":
		for _, k := range ps.collected {
			if p, ok := ps.byKey[k]; ok {
				p.State = StateDeleted
			}
		}
		return
	case "ADD", "DEL":
	default:
		return
	}
	if e.Env.ContainerID == "" {
		return
	}
	p := ps.get(id, e)
	conf, _ := plugin.LoadNetConf(e.Stdin)
	if conf != nil {
		p.vethPrefix, p.strict = conf.VethPrefix, conf.PodSGEnforcingMode == plugin.ModeStrict
		p.resultFormat = conf.ResultFormat
	}
	if e.Env.Command == "ADD" {
		if ce != nil {
			p.State = StatePending
			return
		}
		p.State = StateLive
		p.learn(result, id)
		return
	}
	if p.cleanup == nil {
		var c struct {
			Prev json.RawMessage `json:"prevResult"`
		}
		if json.Unmarshal(e.Stdin, &c) == nil && c.Prev != nil {
			p.learn(c.Prev, id)
		}
	}
	if ce != nil {
		p.State = StatePending
	} else {
		p.State = StateDeleted
	}
}

// learn takes the pod's objects from a result it printed.
func (p *podRec) learn(result json.RawMessage, id podID) {
	st, err := plugin.DecodeResult(result, p.resultFormat, p.IfName, id.ns, id.pod, p.vethPrefix)
	if err != nil {
		return
	}
	p.cleanup = st
	p.HostVeth = st.Pod.HostVeth
	p.IPs = nil
	for _, ip := range st.Pod.IPs {
		p.IPs = append(p.IPs, ip.Addr.String())
	}
}

// account follows ipamd's holdings from its answers.
func (ps *pods) account(method string, req, reply proto.Message, code codes.Code) {
	switch method {
	case "AddNetwork":
		r, _ := reply.(*rpc.AddNetworkReply)
		in := req.(*rpc.AddNetworkRequest)
		if r == nil || !r.GetSuccess() {
			return
		}
		var ips []string
		for _, m := range r.GetIPAllocationMetadata() {
			ips = append(ips, m.GetIPv4Addr()+m.GetIPv6Addr())
		}
		k := key(in.GetContainerID(), in.GetIfName())
		if _, held := ps.alloc[k]; !held {
			ps.assigned += len(ips)
		}
		ps.alloc[k] = ips
	case "DelNetwork":
		in := req.(*rpc.DelNetworkRequest)
		k := key(in.GetContainerID(), in.GetIfName())
		r, _ := reply.(*rpc.DelNetworkReply)
		switch {
		case r != nil && r.GetSuccess():
			if ips, held := ps.alloc[k]; held {
				ps.released += len(ips)
				if why := ps.wrongRelease(k, in.GetReason()); why != "" {
					ps.bad = append(ps.bad, invariant.Violation{Kind: invariant.IPAM,
						What: fmt.Sprintf("ipamd released %s of %s: %s", strings.Join(ips, ","), ps.labelOf(k), why)})
				}
			}
			delete(ps.alloc, k)
		case code == codes.NotFound:
			ps.forgotten += len(ps.alloc[k])
			delete(ps.alloc, k) // ipamd has forgotten it: nothing held
		default:
			return
		}
		if in.GetReason() == plugin.ReasonGC {
			ps.collected = append(ps.collected, k)
		}
	}
}

// wrongRelease says why releasing attachment k now is wrong, "" if it is
// not: a pod's own ADD or DEL releases its address, and a GC those the
// runtime did not list as valid; a GC must never release a valid one,
// nor another invocation a live pod's.
func (ps *pods) wrongRelease(k, reason string) string {
	switch {
	case reason == plugin.ReasonGC && ps.valid[k]:
		return "GC released an attachment the runtime listed as valid"
	case reason == plugin.ReasonGC, k == ps.current:
		return ""
	}
	if p, ok := ps.byKey[k]; ok && p.State == StateLive {
		return "released by another invocation while the pod was live"
	}
	return ""
}

func (ps *pods) labelOf(k string) string {
	if p, ok := ps.byKey[k]; ok {
		return p.label()
	}
	return k
}

func (p *podRec) label() string {
	if p.Name != "" {
		return p.Name
	}
	return p.ContainerID
}

// final lists the attachments and the accounting.
func (ps *pods) final() ([]Pod, Accounting) {
	var out []Pod
	for _, k := range ps.order {
		out = append(out, ps.byKey[k].Pod)
	}
	acc := Accounting{Assigned: ps.assigned, Released: ps.released, Forgotten: ps.forgotten}
	for k, ips := range ps.alloc {
		who, state := k, "not in the journal"
		if p, ok := ps.byKey[k]; ok {
			who, state = p.label(), p.State
		}
		for _, ip := range ips {
			acc.Held = append(acc.Held, Held{IP: ip, Pod: who, State: state})
		}
	}
	sort.Slice(acc.Held, func(i, j int) bool { return acc.Held[i].IP < acc.Held[j].IP })
	return out, acc
}

// world is the final state for the invariants. The replay knows nothing
// of ipamd's allocations but its answers, so the allocation checks are
// the accounting's (ipamd may have reclaimed what the journal cannot
// see), and there are no ENIs or remote pods to route to: the checks are
// the node's pod objects and traffic to each live pod.
func (ps *pods) world(node kernel.API) invariant.World {
	w := invariant.World{Node: node, ENILink: func(d int) string { return fmt.Sprintf("eth%d", d) }}
	for _, k := range ps.order {
		p := ps.byKey[k]
		if p.cleanup == nil || len(p.cleanup.Pod.IPs) == 0 {
			continue
		}
		ip := invariant.Pod{Name: p.label(), ContainerID: p.ContainerID, IP: p.cleanup.Pod.IPs[0].Addr,
			Device: max(p.cleanup.DeviceNumber, 0), HostVeth: p.cleanup.Pod.HostVeth, Netns: p.netns,
			VlanID: p.cleanup.VlanID, Strict: p.strict && p.cleanup.VlanID != 0}
		switch p.State {
		case StateLive:
			w.Live = append(w.Live, ip)
		case StateDeleted:
			w.Deleted = append(w.Deleted, ip)
		case StatePending:
			w.Pending = append(w.Pending, ip)
		}
	}
	return w
}

func (ps *pods) violations() []invariant.Violation { return ps.bad }
