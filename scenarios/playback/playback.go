// Package playback replays a journal of vpc-cni invocations
// (plugin/journal) on the kernel model: every recorded ADD, DEL, CHECK, GC
// and STATUS runs again through the plugin's own entry points, on a model
// node, with ipamd's recorded answers, and the pod namespaces appearing
// and disappearing when the journal saw them do so. The report says what
// each invocation did to the kernel, whether it did what the recorded one
// did (a divergence otherwise), what the journal's pods left in the kernel
// in the end, the IP accounting, and the invariants' findings (LEAK,
// BROKEN, MISROUTE to a live pod, DOUBLE-ASSIGN).
//
// A replay under a legacy delete policy (scenarios/policy) shows what the
// reference's DEL would have done with the same runtime calls and the same
// ipamd answers.
package playback

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/journal"
	"github.com/vpccni/vpccni/scenarios/invariant"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// NodeNS is the model path of the node namespace the plugin runs in.
const NodeNS = "node"

// Options of a replay.
type Options struct {
	// Policy runs each DEL; nil is vpccni's flow (policy.Default).
	Policy policy.Policy
	// Log receives the plugin's log; nil discards it.
	Log *slog.Logger
}

// Report is what a replay found.
type Report struct {
	Policy string  `json:"policy"`
	Steps  []*Step `json:"steps"`
	// Left is, per namespace (NodeNS, or a pod's CNI_NETNS), the kernel
	// objects the journal's invocations made and did not remove, as
	// kernel.State lines; Removed what they removed of the node's own.
	Left    map[string][]string `json:"left"`
	Removed map[string][]string `json:"removed,omitempty"`
	Pods    []Pod               `json:"pods"`
	IPs     Accounting          `json:"ips"`
	// Violations are the invariants' findings on the final state.
	Violations  []invariant.Violation `json:"violations"`
	Divergences int                   `json:"divergences"`
}

// Verdict is "clean", the most serious violation kind, or DIVERGED when
// vpccni's own flow did not do what the journal recorded (a replay under
// another policy is expected to diverge, and is judged by the invariants
// alone).
func (r *Report) Verdict() string {
	if k := invariant.Main(r.Violations); k != "" {
		return k
	}
	if r.Divergences > 0 && r.Policy == (policy.Default{}).Name() {
		return "DIVERGED"
	}
	return "clean"
}

// Step is one replayed invocation.
type Step struct {
	N         int       `json:"n"` // 1-based, in journal order
	Time      time.Time `json:"time"`
	Verb      string    `json:"verb"`
	Pod       string    `json:"pod,omitempty"`
	Container string    `json:"containerID,omitempty"`
	IfName    string    `json:"ifName,omitempty"`
	// Recorded and Replayed are "ok", "ok <addresses>" or "error <code>: <msg>".
	Recorded string   `json:"recorded"`
	Replayed string   `json:"replayed"`
	Ipamd    []string `json:"ipamd,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Diverged []string `json:"diverged,omitempty"`
	// Added and Removed are the step's kernel changes, "<namespace>: <line>".
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Play replays entries on a fresh model node.
func Play(entries []journal.Entry, opt Options) (*Report, error) {
	pol := opt.Policy
	if pol == nil {
		pol = policy.Default{}
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := model.New()
	if err := k.AddNamespace(NodeNS); err != nil {
		return nil, err
	}
	if err := plugNode(k, entries); err != nil {
		return nil, err
	}
	if err := forwarding(k); err != nil {
		return nil, err
	}
	// The replay's own stateDir: the recorded one (or the default,
	// /var/lib/cni/vpc-cni) is the machine's, not the replay's.
	state, err := os.MkdirTemp("", "vpccni-playback-state-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	pb := &player{k: k, pol: pol, log: log, pods: newPods(), base: map[string]kernel.State{}, stateDir: state,
		rep: &Report{Policy: pol.Name(), Left: map[string][]string{}}}
	if err := pb.baseline(NodeNS); err != nil {
		return nil, err
	}
	for i := range entries {
		if err := pb.step(i+1, &entries[i]); err != nil {
			return nil, fmt.Errorf("entry %d (%s %s): %w", i+1, entries[i].Env.Command, entries[i].Env.ContainerID, err)
		}
	}
	return pb.rep, pb.finish()
}

type player struct {
	k    *model.Kernel
	pol  policy.Policy
	log  *slog.Logger
	pods *pods
	rep  *Report
	// base is each namespace as it was before the journal touched it: the
	// node as built, a pod namespace empty (as the runtime makes it).
	base map[string]kernel.State
	// stateDir replaces every entry's stateDir (the attachment records).
	stateDir string
}

func (pb *player) baseline(path string) error {
	if _, ok := pb.base[path]; ok {
		return nil
	}
	s, err := pb.snapshot(path)
	pb.base[path] = s
	return err
}

// forwarding turns on what a node has on (the OS for IPv4, ipamd for
// IPv6), so the invariants' lookups route through it.
func forwarding(k *model.Kernel) error {
	h, err := k.Open(NodeNS)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := h.SysctlSet(key, "1"); err != nil {
			return fmt.Errorf("node sysctl %s: %w", key, err)
		}
	}
	return nil
}

// step replays one entry.
func (pb *player) step(n int, e *journal.Entry) error {
	s := &Step{N: n, Time: e.Time, Verb: e.Env.Command, Container: e.Env.ContainerID, IfName: e.Env.IfName,
		Recorded: outcome(e.Result, e.Error)}
	pb.rep.Steps = append(pb.rep.Steps, s)
	id := pb.pods.identify(e)
	s.Pod = id.name

	if e.Env.Netns != "" && !strings.HasPrefix(e.Env.Netns, "/") {
		// A runtime names namespaces by absolute path; NodeNS is not one,
		// so no entry can make the replay treat the node as a pod.
		return fmt.Errorf("CNI_NETNS %q is not an absolute path", e.Env.Netns)
	}
	watched := []string{NodeNS}
	if e.Env.Netns != "" {
		watched = append(watched, e.Env.Netns)
	}
	// The runtime's part first (said in the step's notes), so the step's
	// diff is the plugin's.
	pb.pods.begin(id.key, e)
	if err := pb.runtimeNamespace(e, s); err != nil {
		return err
	}
	before, err := pb.snapshots(watched)
	if err != nil {
		return err
	}
	stdin, err := replayStdin(e.Stdin, pb.stateDir)
	if err != nil {
		return err
	}
	ipamd := &recordedIpamd{calls: e.Ipamd, observe: pb.pods.account}
	p := plugin.New(plugin.Env{Kernel: pb.k.Opener(NodeNS), Dial: ipamd.dial, DialInventory: ipamd.dialInventory, DeleteFlow: pb.pol.Del,
		Log: pb.log, Version: "vpccni-playback", IsHostNS: func(path string) (bool, error) { return path == NodeNS, nil }})
	args := &skel.CmdArgs{ContainerID: e.Env.ContainerID, Netns: e.Env.Netns, IfName: e.Env.IfName, Args: e.Env.Args,
		Path: e.Env.Path, StdinData: stdin}
	res, verr := pb.run(p, e.Env.Command, args)
	ipamd.finish()
	s.Ipamd = ipamd.made
	s.Diverged = append(s.Diverged, ipamd.diverged...)

	var resJSON json.RawMessage
	if res != nil {
		if resJSON, err = json.Marshal(res); err != nil {
			return err
		}
	}
	ce := plugin.AsCNIError(verr)
	s.Replayed = outcome(resJSON, ce)
	if d := compare(e, resJSON, ce); d != "" {
		s.Diverged = append(s.Diverged, d)
	}
	pb.pods.apply(id, e, resJSON, ce)

	for _, path := range watched {
		if err := pb.baseline(path); err != nil {
			return err
		}
	}
	after, err := pb.snapshots(watched)
	if err != nil {
		return err
	}
	for _, path := range watched {
		add, rem := kernel.Diff(before[path], after[path])
		for _, l := range add {
			s.Added = append(s.Added, Label(path)+": "+l)
		}
		for _, l := range rem {
			s.Removed = append(s.Removed, Label(path)+": "+l)
		}
	}
	return nil
}

// runtimeNamespace makes the pod namespace exist or not as the plugin
// found it: the runtime creates it before ADD, and removes it (with the
// veth pair and its routes) whenever it likes; the journal sees that only
// when an invocation opens it.
//
// A GC says more: the runtime lists the sandboxes it still has, so the
// namespace of every other attachment the journal has seen is gone.
func (pb *player) runtimeNamespace(e *journal.Entry, s *Step) error {
	if e.Env.Command == "GC" {
		for _, path := range pb.pods.goneAtGC() {
			if pb.k.HasNamespace(path) {
				s.Notes = append(s.Notes, "not among the runtime's valid attachments: its sandbox's namespace "+path+" is gone")
				if err := pb.k.DeleteNamespace(path); err != nil {
					return err
				}
			}
		}
	}
	if e.Netns == nil {
		return nil
	}
	has := pb.k.HasNamespace(e.Netns.Path)
	switch {
	case e.Netns.Exists && !has:
		if err := pb.k.AddNamespace(e.Netns.Path); err != nil {
			return err
		}
		s.Notes = append(s.Notes, "the runtime created the pod namespace "+e.Netns.Path)
		// A new namespace starts empty: its baseline is what it has now.
		delete(pb.base, e.Netns.Path)
		return pb.baseline(e.Netns.Path)
	case !e.Netns.Exists && has:
		s.Notes = append(s.Notes, "the runtime had removed the pod namespace "+e.Netns.Path)
		return pb.k.DeleteNamespace(e.Netns.Path)
	}
	return nil
}

// run calls the verb as the binary's skel would; a DEL's decision is the
// replay's policy (plugin.Env.DeleteFlow), as in the harness's runtime.
func (pb *player) run(p *plugin.Plugin, verb string, args *skel.CmdArgs) (types.Result, error) {
	switch verb {
	case "ADD":
		return p.Add(args)
	case "DEL":
		return nil, p.Del(args)
	case "CHECK":
		return nil, p.Check(args)
	case "GC":
		return nil, p.GC(args)
	case "STATUS":
		return nil, p.Status(args)
	}
	return nil, fmt.Errorf("verb %q", verb)
}

// replayStdin is the recorded stdin without the files it names on the
// recording node: the replay must not append to that node's log or
// journal paths on this machine, nor write attachment records into its
// stateDir (or the default one, when the netconf names none): the
// replay's records go to its own temporary stateDir.
func replayStdin(stdin json.RawMessage, stateDir string) ([]byte, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	delete(conf, "pluginLogFile")
	delete(conf, "journalFile")
	sd, err := json.Marshal(stateDir)
	if err != nil {
		return nil, err
	}
	conf["stateDir"] = sd
	return json.Marshal(conf)
}

// outcome is how a step's result reads in the report.
func outcome(result json.RawMessage, ce *types.Error) string {
	if ce != nil {
		return fmt.Sprintf("error %d: %s", ce.Code, ce.Msg)
	}
	if result == nil {
		return "ok"
	}
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if json.Unmarshal(result, &r) != nil {
		return "ok (result not JSON)"
	}
	out := "ok"
	for _, ip := range r.IPs {
		out += " " + ip.Address
	}
	return out
}

// compare says how the replayed outcome differs from the recorded one.
func compare(e *journal.Entry, result json.RawMessage, ce *types.Error) string {
	switch {
	case (e.Error == nil) != (ce == nil):
		return fmt.Sprintf("recorded %s, replayed %s", outcome(e.Result, e.Error), outcome(result, ce))
	case ce != nil && ce.Code != e.Error.Code:
		return fmt.Sprintf("recorded error code %d, replayed %d", e.Error.Code, ce.Code)
	case ce == nil && !sameJSON(e.Result, result):
		return fmt.Sprintf("the replayed result differs from the recorded one:\n    recorded %s\n    replayed %s", e.Result, result)
	}
	return ""
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func (pb *player) snapshot(path string) (kernel.State, error) {
	if !pb.k.HasNamespace(path) {
		return kernel.State{}, nil
	}
	h, err := pb.k.Open(path)
	if err != nil {
		return kernel.State{}, err
	}
	defer h.Close()
	return kernel.Snapshot(h)
}

func (pb *player) snapshots(paths []string) (map[string]kernel.State, error) {
	out := map[string]kernel.State{}
	for _, p := range paths {
		s, err := pb.snapshot(p)
		if err != nil {
			return nil, err
		}
		out[p] = s
	}
	return out, nil
}

// Label names a namespace in reports: "node", or the pod's CNI_NETNS.
func Label(path string) string {
	if path == NodeNS {
		return "node"
	}
	return path
}

// finish computes what was left, the accounting and the findings.
func (pb *player) finish() error {
	paths := make([]string, 0, len(pb.base))
	for p := range pb.base {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if !pb.k.HasNamespace(path) {
			continue // the runtime removed it, and everything in it
		}
		now, err := pb.snapshot(path)
		if err != nil {
			return err
		}
		add, rem := kernel.Diff(pb.base[path], now)
		if len(add) > 0 {
			pb.rep.Left[path] = add
		}
		if len(rem) > 0 {
			if pb.rep.Removed == nil {
				pb.rep.Removed = map[string][]string{}
			}
			pb.rep.Removed[path] = rem
		}
	}
	node, err := pb.k.Open(NodeNS)
	if err != nil {
		return err
	}
	defer node.Close()
	for _, s := range pb.rep.Steps {
		pb.rep.Divergences += len(s.Diverged)
	}
	pb.rep.Pods, pb.rep.IPs = pb.pods.final()
	vs, err := invariant.Check(pb.pods.world(node))
	if err != nil {
		return err
	}
	pb.rep.Violations = append(vs, pb.pods.violations()...)
	return nil
}

func unmarshalReply(b json.RawMessage, m proto.Message) error { return protojson.Unmarshal(b, m) }
