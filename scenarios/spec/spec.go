// Package spec is the scenario file format: a node, its pods and a
// timeline of events, with the expected outcome per delete policy. It only
// parses and validates; the engine runs what it describes.
package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/scenarios/failpoints"
)

// Scenario is one file of the library.
type Scenario struct {
	Name        string `json:"name"`
	Incident    string `json:"incident,omitempty"`
	Description string `json:"description,omitempty"`
	// KnownLimit says, in a line, why vpccni's own flow cannot be clean
	// here yet. Such a scenario keeps a limit visible (its expected
	// default verdict is not clean, and flips to a mismatch the day the
	// limit is closed); replay's total line counts its cells apart from
	// the ones that must be clean.
	KnownLimit string `json:"knownLimit,omitempty"`
	// Headline marks the library's main scenario: replay runs and lists
	// it first, whatever the order of the files it is given.
	Headline bool `json:"headline,omitempty"`
	// Modes the scenario runs in: ipv4, ipv6, branch-eni-strict,
	// branch-eni-standard (every pod on a branch ENI of its own).
	Modes []string `json:"modes"`
	Node  Node     `json:"node"`
	Pods  []Pod    `json:"pods"`
	// Timeline is run in order on a simulated clock.
	Timeline []Event `json:"timeline"`
	// Expect maps a delete policy to the expected verdict, "clean" or
	// "leak", for every mode, or per mode ({ipv4: leak, branch-eni-strict:
	// clean}). The scenario runs under exactly the policies listed.
	Expect map[string]Verdicts `json:"expect"`

	// File is where it was read from (not part of the format).
	File string `json:"-"`
}

// Node is the node under test.
type Node struct {
	InstanceType string `json:"instanceType"`
	// KubeletRetries is how many times kubelet retries a failed DEL (with
	// back-off 1s, 2s, 4s, …) before it gives up and the runtime removes
	// the sandbox anyway. Default 5.
	KubeletRetries int `json:"kubeletRetries,omitempty"`
	// Start is the in-memory EC2 instance at start: "full" (default, every
	// ENI attached with every address: ENI d in 10.0.(d+1).0/24) or
	// "fresh" (the primary ENI alone, no secondary address: the warm pool
	// grows it from the primary's subnet).
	Start string `json:"start,omitempty"`
	// WarmPool turns ipamd's warm-pool manager on with these targets; nil
	// keeps the pool as the instance starts (a "full" instance).
	WarmPool *WarmPool `json:"warmPool,omitempty"`
	// ForeignRules are another agent's rules on the node before any pod
	// (an operator's, another CNI's): no run may remove them.
	ForeignRules []ForeignRule `json:"foreignRules,omitempty"`
	// Ipamd tunes ipamd's timing, within the ranges ipamd accepts.
	Ipamd *IpamdSettings `json:"ipamd,omitempty"`
}

// WarmPool are ipamd's warm-pool targets (the reference's variables).
type WarmPool struct {
	WarmENITarget    int  `json:"warmENITarget,omitempty"`
	WarmIPTarget     int  `json:"warmIPTarget,omitempty"`
	MinimumIPTarget  int  `json:"minimumIPTarget,omitempty"`
	WarmPrefixTarget int  `json:"warmPrefixTarget,omitempty"`
	PrefixDelegation bool `json:"prefixDelegation,omitempty"`
	MaxENI           int  `json:"maxENI,omitempty"`
}

// Failpoint arms one failpoint: Name (see `replay failpoints`) does
// Action (crash, error, hang) on its Occurrence-th hit from here (default
// 1). Memory is what ipamd finds of its checkpoint when kubelet restarts
// it after a crash at this point (kept, lost, corrupt; default kept).
type Failpoint struct {
	Name       string `json:"name"`
	Action     string `json:"action"`
	Occurrence int    `json:"occurrence,omitempty"`
	Memory     string `json:"memory,omitempty"`
}

// Fault makes the in-memory EC2 fail the next calls of one API.
type Fault struct {
	API   string `json:"api"`   // e.g. AssignPrivateIpAddresses
	Code  string `json:"code"`  // e.g. RequestLimitExceeded
	Times int    `json:"times"` // how many calls fail
}

// Pod declares a pod: "namespace/name", and the ENI device its address
// should come from (the harness pins it through ipamd's placement hook).
type Pod struct {
	Name   string `json:"name"`
	Device int    `json:"device"`
	// Count declares Count pods named <name>-0 … <name>-<Count-1>; events
	// name them all with <name>-*.
	Count int `json:"count,omitempty"`
	// AddTakes is how long the pod's ADD spends between ipamd's answer and
	// its host route (a slow node, a long IPv6 DAD): ipamd's loops run
	// meanwhile on the simulated clock.
	AddTakes *Duration `json:"addTakes,omitempty"`
}

// Event is one step of the timeline. Exactly one field is set.
type Event struct {
	// Add runs the sandboxes of these pods (CNI ADD).
	Add []PodRef `json:"add,omitempty"`
	// Delete asks kubelet to delete these pods (CNI DEL with prevResult;
	// on failure kubelet retries with back-off).
	Delete []string `json:"delete,omitempty"`
	// ForceDelete deletes these pods with grace period 0: the API server
	// forgets them at once, kubelet sends one DEL and does not retry.
	ForceDelete []string `json:"force-delete,omitempty"`
	// WithoutPrevResult, with delete or force-delete, sends the DEL with no
	// prevResult, as when it races the ADD before the runtime cached the
	// ADD's result (#3270: an ADD and a force DEL 40 ms apart).
	WithoutPrevResult bool `json:"withoutPrevResult,omitempty"`
	// ForgePrevResult, with delete, rewrites the runtime's cached result
	// before the DEL: a hostile or corrupted prevResult.
	ForgePrevResult *Forgery `json:"forgePrevResult,omitempty"`
	// LateDel sends, for each pod, containerd's second DEL of its previous
	// sandbox (RemovePodSandbox: CNI_NETNS empty, no prevResult, that
	// sandbox's container ID), late or once more: after a new sandbox of
	// the same name runs, after an ipamd restart.
	LateDel []string `json:"late-del,omitempty"`
	// RuntimeForgets makes the runtime lose these pods' sandboxes (a
	// containerd restart that lost its state): no DEL is sent, their
	// namespaces stay, and a GC no longer lists them as valid.
	RuntimeForgets []string `json:"runtime-forgets,omitempty"`
	// GC runs CNI GC (1.1) with the runtime's valid attachments: every
	// running sandbox it has not forgotten.
	GC *struct{} `json:"gc,omitempty"`
	// Evict stops ipamd as a drained node's aws-node pod goes ("aws-node").
	Evict string `json:"evict,omitempty"`
	// CancelEviction starts ipamd again ("aws-node").
	CancelEviction string `json:"cancel-eviction,omitempty"`
	// Restart kills ipamd and starts it again at once ("ipamd"): a crash
	// or an OOM kill rather than an eviction.
	Restart string `json:"restart,omitempty"`
	// Memory says what the restarted ipamd finds of its checkpoint:
	// "kept" (default: the file survives, as since the reference's
	// v1.12), "lost" (no file: the incident's condition) or "corrupt"
	// (a truncated file).
	Memory string `json:"memory,omitempty"`
	// BadConfig, with cancel-eviction or restart, starts ipamd with a
	// setting out of its range (an operator's typo in the DaemonSet): it
	// refuses to start and stays down until the next restart.
	BadConfig bool `json:"badConfig,omitempty"`
	// EC2Fault makes the in-memory EC2 fail the next calls of an API.
	EC2Fault *Fault `json:"ec2-fault,omitempty"`
	// Failpoint arms a failpoint of the plugin, its driver or ipamd from
	// this point of the timeline.
	Failpoint *Failpoint `json:"failpoint,omitempty"`
	// Wait advances the clock (kubelet retries fall due meanwhile).
	Wait *Duration `json:"wait,omitempty"`
	// Settle advances the clock until kubelet has nothing left to retry.
	Settle *struct{} `json:"settle,omitempty"`
	// Modes, when set, runs the event only in these modes (an address on
	// another node, say, cannot happen in IPv6 mode, where every address
	// is from this node's delegated prefix).
	Modes []string `json:"modes,omitempty"`
}

// PodRef names a pod in an add event: a declared pod by name, or a pod on
// another node that takes the address a deleted pod had.
type PodRef struct {
	Name string `json:"name"`
	// Node "other" places the pod off this node; with ReuseIPOf it holds
	// the address the named (deleted) pod had here.
	Node      string `json:"node,omitempty"`
	ReuseIPOf string `json:"reuseIPOf,omitempty"`
}

// UnmarshalJSON accepts a bare name or an object.
func (r *PodRef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &r.Name)
	}
	type plain PodRef
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(r))
}

// Verdicts is the expected verdict of a policy: one for every mode, or one
// per mode.
type Verdicts struct {
	All    string
	ByMode map[string]string
}

// UnmarshalJSON accepts "leak" or {ipv4: leak, ipv6: clean}.
func (v *Verdicts) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &v.All)
	}
	return json.Unmarshal(b, &v.ByMode)
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (v Verdicts) MarshalJSON() ([]byte, error) {
	if v.ByMode != nil {
		return json.Marshal(v.ByMode)
	}
	return json.Marshal(v.All)
}

// For is the expected verdict in a mode ("" when not stated).
func (v Verdicts) For(mode string) string {
	if v.ByMode != nil {
		return v.ByMode[mode]
	}
	return v.All
}

// Expected is the verdict expected of a policy in a mode.
func (s *Scenario) Expected(policy, mode string) (string, bool) {
	v, ok := s.Expect[policy]
	if !ok || v.For(mode) == "" {
		return "", false
	}
	return v.For(mode), true
}

// Duration is a time.Duration written as "3s".
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"3s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 || v > 24*time.Hour {
		return fmt.Errorf("duration %q is not between 0 and 24h", s)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Known values, for validation and --help.
var (
	KnownModes = []string{"ipv4", "ipv6", "branch-eni-strict", "branch-eni-standard"}
	// KnownVerdicts: "clean", or the kind of violation the run must show
	// (lower case of the invariant kinds).
	KnownVerdicts = []string{"clean", "leak", "broken", "misroute", "ipam", "double-assign", "stuck", "foreign", "early-release", "audit-disagrees"}
	KnownMemory   = []string{"kept", "lost", "corrupt"}
	podName       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// Load reads and validates a scenario file.
func Load(path string) (*Scenario, error) { return loadFile(path, Parse) }

func (s *Scenario) setSource(path string, _ []byte) { s.File = path }

// Parse decodes YAML strictly (an unknown or misspelt key is an error) and
// validates the result.
func Parse(b []byte) (*Scenario, error) { return decodeStrict[Scenario](b, "scenario") }

// sourced is a file's parsed form that keeps where it came from.
type sourced interface {
	setSource(path string, content []byte)
}

// loadFile reads a scenario or fleet file and parses it; a parse error
// names the file (a read error names it already: os.ReadFile's).
func loadFile[P sourced](path string, parse func([]byte) (P, error)) (P, error) {
	var none P
	b, err := os.ReadFile(path)
	if err != nil {
		return none, err
	}
	v, err := parse(b)
	if err != nil {
		return none, fmt.Errorf("%s: %w", path, err)
	}
	v.setSource(path, b)
	return v, nil
}

// decodeStrict decodes YAML into a new T strictly (an unknown or misspelt
// key is an error: a typo must not silently drop a setting) and validates
// it; what names the kind of file in the error.
func decodeStrict[T any, P interface {
	*T
	validate() error
}](b []byte, what string) (P, error) {
	p := P(new(T))
	if err := yaml.UnmarshalStrict(b, p); err != nil {
		return nil, fmt.Errorf("not a %s: %w", what, err)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Scenario) validate() error {
	if s.Name == "" {
		return fmt.Errorf("name is missing")
	}
	if len(s.Modes) == 0 {
		return fmt.Errorf("modes is empty (known: %s)", strings.Join(KnownModes, ", "))
	}
	for _, m := range s.Modes {
		if !contains(KnownModes, m) {
			return fmt.Errorf("mode %q is not one of %s", m, strings.Join(KnownModes, ", "))
		}
	}
	if s.Node.InstanceType == "" {
		s.Node.InstanceType = "m5.large"
	}
	if s.Node.KubeletRetries == 0 {
		s.Node.KubeletRetries = 5
	}
	if s.Node.KubeletRetries < 0 || s.Node.KubeletRetries > 20 {
		return fmt.Errorf("node.kubeletRetries %d is not between 0 and 20", s.Node.KubeletRetries)
	}
	switch s.Node.Start {
	case "":
		s.Node.Start = "full"
	case "full", "fresh":
	default:
		return fmt.Errorf("node.start %q: want full or fresh", s.Node.Start)
	}
	if s.Node.Start == "fresh" && s.Node.WarmPool == nil {
		return fmt.Errorf("node.start fresh needs node.warmPool: nothing would ever add an address")
	}
	if err := s.Node.validateAdversary(); err != nil {
		return err
	}
	if err := s.expandCounts(); err != nil {
		return err
	}
	declared := map[string]bool{}
	for i, p := range s.Pods {
		if !podName.MatchString(p.Name) {
			return fmt.Errorf("pods[%d]: %q is not namespace/name", i, p.Name)
		}
		if declared[p.Name] {
			return fmt.Errorf("pods[%d]: %q declared twice", i, p.Name)
		}
		if p.Device < 0 || p.Device > 15 {
			return fmt.Errorf("pods[%d]: device %d is not between 0 and 15", i, p.Device)
		}
		if p.AddTakes != nil && p.AddTakes.Duration > 5*time.Minute {
			return fmt.Errorf("pods[%d]: addTakes %s is longer than 5m (the plugin's longest ipamdTimeout)", i, p.AddTakes)
		}
		declared[p.Name] = true
	}
	if len(s.Timeline) == 0 {
		return fmt.Errorf("timeline is empty")
	}
	for i := range s.Timeline {
		if err := s.validateEvent(i, declared); err != nil {
			return fmt.Errorf("timeline[%d]: %w", i, err)
		}
	}
	if len(s.Expect) == 0 {
		return fmt.Errorf("expect is empty: say what each policy should give")
	}
	for pol, v := range s.Expect {
		for _, m := range s.Modes {
			if got := v.For(m); !contains(KnownVerdicts, got) {
				return fmt.Errorf("expect[%s] in mode %s: %q is not one of %s", pol, m, got, strings.Join(KnownVerdicts, ", "))
			}
		}
		for m := range v.ByMode {
			if !contains(s.Modes, m) {
				return fmt.Errorf("expect[%s]: mode %q is not one of the scenario's modes", pol, m)
			}
		}
	}
	if s.KnownLimit != "" {
		def, ok := s.Expect["default"]
		for _, m := range s.Modes {
			if !ok || def.For(m) == "clean" {
				return fmt.Errorf("knownLimit: expect[default] in mode %s must say what the limit leaves (not clean)", m)
			}
		}
	}
	return nil
}

func (s *Scenario) validateEvent(i int, declared map[string]bool) error {
	e := &s.Timeline[i]
	for _, m := range e.Modes {
		if !contains(s.Modes, m) {
			return fmt.Errorf("event mode %q is not one of the scenario's modes (%s)", m, strings.Join(s.Modes, ", "))
		}
	}
	set := 0
	for _, b := range []bool{e.Add != nil, e.Delete != nil, e.ForceDelete != nil, e.Evict != "", e.CancelEviction != "",
		e.Restart != "", e.EC2Fault != nil, e.Failpoint != nil, e.Wait != nil, e.Settle != nil, e.LateDel != nil,
		e.RuntimeForgets != nil, e.GC != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("an event has exactly one of add, delete, force-delete, evict, cancel-eviction, restart, ec2-fault, failpoint, wait, settle, late-del, runtime-forgets, gc (got %d)", set)
	}
	if (e.Add != nil && len(e.Add) == 0) || (e.Delete != nil && len(e.Delete) == 0) || (e.ForceDelete != nil && len(e.ForceDelete) == 0) ||
		(e.LateDel != nil && len(e.LateDel) == 0) || (e.RuntimeForgets != nil && len(e.RuntimeForgets) == 0) {
		return fmt.Errorf("an add, delete, force-delete, late-del or runtime-forgets names no pod")
	}
	if err := e.ForgePrevResult.validate(e); err != nil {
		return err
	}
	if err := s.expandGlobs(e); err != nil {
		return err
	}
	if f := e.Failpoint; f != nil {
		switch {
		case !failpoints.Known(f.Name):
			return fmt.Errorf("failpoint %q is not a failpoint of this build (replay failpoints lists them)", f.Name)
		case !contains([]string{"crash", "error", "hang"}, f.Action):
			return fmt.Errorf("failpoint %s: action %q is not crash, error or hang", f.Name, f.Action)
		case f.Occurrence < 0 || f.Occurrence > 10000:
			return fmt.Errorf("failpoint %s: occurrence %d is not between 1 and 10000", f.Name, f.Occurrence)
		case f.Memory != "" && !contains(KnownMemory, f.Memory):
			return fmt.Errorf("failpoint %s: memory %q is not one of %s", f.Name, f.Memory, strings.Join(KnownMemory, ", "))
		}
		if f.Occurrence == 0 {
			f.Occurrence = 1
		}
	}
	if f := e.EC2Fault; f != nil && (f.API == "" || f.Code == "" || f.Times < 1 || f.Times > 1000) {
		return fmt.Errorf("ec2-fault needs api, code and times between 1 and 1000")
	}
	for j := range e.Add {
		r := &e.Add[j]
		r.Name = s.Resolve(r.Name)
		switch {
		case r.Node == "" && r.ReuseIPOf == "":
			if !declared[r.Name] {
				return fmt.Errorf("add: pod %q is not declared in pods", r.Name)
			}
		case r.Node == "other":
			if r.ReuseIPOf == "" {
				return fmt.Errorf("add: a pod on node other needs reuseIPOf")
			}
			r.ReuseIPOf = s.Resolve(r.ReuseIPOf)
			if !declared[r.ReuseIPOf] {
				return fmt.Errorf("add: reuseIPOf %q is not declared in pods", r.ReuseIPOf)
			}
		default:
			return fmt.Errorf("add: node %q is not supported (only \"other\", with reuseIPOf)", r.Node)
		}
	}
	for _, list := range [][]string{e.Delete, e.ForceDelete, e.LateDel, e.RuntimeForgets} {
		for j, n := range list {
			list[j] = s.Resolve(n)
			if !declared[list[j]] {
				return fmt.Errorf("delete: pod %q is not declared in pods", n)
			}
		}
	}
	for _, a := range []string{e.Evict, e.CancelEviction} {
		if a != "" && a != "aws-node" {
			return fmt.Errorf("only aws-node can be evicted, not %q", a)
		}
	}
	if e.Restart != "" && e.Restart != "ipamd" {
		return fmt.Errorf("only ipamd can be restarted, not %q", e.Restart)
	}
	if e.Memory != "" && !contains(KnownMemory, e.Memory) {
		return fmt.Errorf("memory %q is not one of %s", e.Memory, strings.Join(KnownMemory, ", "))
	}
	if e.WithoutPrevResult && e.Delete == nil && e.ForceDelete == nil {
		return fmt.Errorf("withoutPrevResult only goes with delete or force-delete")
	}
	if e.CancelEviction == "" && e.Restart == "" && (e.Memory != "" || e.BadConfig) {
		return fmt.Errorf("memory and badConfig only go with cancel-eviction or restart")
	}
	return nil
}

// expandCounts replaces each pod with a count by its numbered pods.
func (s *Scenario) expandCounts() error {
	var out []Pod
	for i, p := range s.Pods {
		if p.Count == 0 {
			out = append(out, p)
			continue
		}
		if p.Count < 0 || p.Count > 1000 {
			return fmt.Errorf("pods[%d]: count %d is not between 1 and 1000", i, p.Count)
		}
		for j := range p.Count {
			out = append(out, Pod{Name: fmt.Sprintf("%s-%d", p.Name, j), Device: p.Device, AddTakes: p.AddTakes})
		}
	}
	s.Pods = out
	return nil
}

// expandGlobs replaces "<name>-*" in an event by every declared pod whose
// name starts with "<name>-", in declaration order.
func (s *Scenario) expandGlobs(e *Event) error {
	expand := func(n string) ([]string, error) {
		if !strings.HasSuffix(n, "-*") {
			return []string{n}, nil
		}
		full := s.Resolve(strings.TrimSuffix(n, "*") + "0")
		stem := strings.TrimSuffix(full, "0")
		var hit []string
		for _, p := range s.Pods {
			if strings.HasPrefix(p.Name, stem) {
				hit = append(hit, p.Name)
			}
		}
		if len(hit) == 0 {
			return nil, fmt.Errorf("%q names no declared pod", n)
		}
		return hit, nil
	}
	var add []PodRef
	for _, r := range e.Add {
		names, err := expand(r.Name)
		if err != nil {
			return err
		}
		for _, n := range names {
			c := r
			c.Name = n
			add = append(add, c)
		}
	}
	if e.Add != nil {
		e.Add = add
	}
	for _, list := range []*[]string{&e.Delete, &e.ForceDelete, &e.LateDel, &e.RuntimeForgets} {
		if *list == nil {
			continue
		}
		var out []string
		for _, n := range *list {
			names, err := expand(n)
			if err != nil {
				return err
			}
			out = append(out, names...)
		}
		*list = out
	}
	return nil
}

// Resolve turns a short pod name ("web-0") into the declared full name
// ("default/web-0") when exactly one declared pod has it.
func (s *Scenario) Resolve(n string) string {
	if strings.Contains(n, "/") {
		return n
	}
	var hit []string
	for _, p := range s.Pods {
		if strings.HasSuffix(p.Name, "/"+n) {
			hit = append(hit, p.Name)
		}
	}
	if len(hit) == 1 {
		return hit[0]
	}
	return "default/" + n
}

// Policies lists the policies the scenario states an expectation for.
func (s *Scenario) Policies() []string {
	var ps []string
	for p := range s.Expect {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// PodByName returns the declared pod.
func (s *Scenario) PodByName(n string) (Pod, bool) {
	for _, p := range s.Pods {
		if p.Name == n {
			return p, true
		}
	}
	return Pod{}, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
