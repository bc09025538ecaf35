package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// FuzzParse: a scenario file is written by hand and by `replay explore`,
// and the engine trusts what Parse returns. Whatever the bytes, Parse
// never panics, and
//   - a rejected file gets an error that says where the problem is (a
//     YAML position, or the field: name, modes, node.…, pods[i],
//     timeline[i], expect[…]);
//   - an accepted file is what the engine assumes (see checkScenario):
//     every event has exactly one action, every pod an event names is
//     declared, counts and globs are expanded, every verdict is known;
//   - an accepted file, written back, parses to the same scenario
//     (validation normalises once: names resolved, counts and globs
//     expanded, defaults filled).
//
// Seeds: the scenario library, the f.Add calls below and
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	lib, err := filepath.Glob(filepath.Join("..", "library", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range lib {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(good))
	for _, s := range []string{
		strings.Replace(good, "pods: [{name: default/web-0, device: 1}]",
			"pods: [{name: default/web, device: 1, count: 3}, {name: kube-system/web-0, device: 0}]", 1) +
			"  - delete: [web-*]\n  - force-delete: [kube-system/web-0]\n    withoutPrevResult: true\n",
		strings.Replace(good, "- settle: {}", "- {restart: ipamd, memory: corrupt}\n  - failpoint: {name: driver/del-rule-from-pod, action: hang, memory: lost}\n"+
			"  - ec2-fault: {api: AssignPrivateIpAddresses, code: RequestLimitExceeded, times: 3}\n  - {wait: 1m30s, modes: [ipv4]}", 1),
		strings.Replace(good, "name: t", "name: t\nnode: {start: fresh, kubeletRetries: 20, warmPool: {warmIPTarget: 2, prefixDelegation: true}}", 1),
		strings.Replace(good, "- settle: {}", "- add: [{name: default/api-0, node: other, reuseIPOf: web-0}]", 1),
		strings.Replace(good, "- settle: {}", "- late-del: [web-0]\n  - runtime-forgets: [web-0]\n  - gc: {}\n"+
			"  - {delete: [web-0], forgePrevResult: {table: 100, ips: [10.99.0.5/32]}}", 1),
		strings.Replace(good, "name: t", "name: t\nnode: {ipamd: {reconcileGrace: minimum, reconcileInterval: 5s, reconcile: false}, "+
			"foreignRules: [{priority: 512, to: 10.99.0.5/32, table: 254}]}", 1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if s != nil {
				t.Fatalf("Parse returned both a scenario and %v", err)
			}
			checkNamesTheProblem(t, err)
			return
		}
		checkScenario(t, s)

		// Written back, it reads the same.
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("writing an accepted scenario: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted scenario, written back, is rejected: %v\n%s", err, out)
		}
		a, _ := json.Marshal(s)
		z, _ := json.Marshal(again)
		if string(a) != string(z) {
			t.Fatalf("an accepted scenario, written back, reads differently:\n%s\n%s", a, z)
		}
	})
}

// checkNamesTheProblem: the error says where, so a hand-written file can
// be fixed from the message alone.
func checkNamesTheProblem(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if strings.HasPrefix(msg, "not a scenario: ") && len(msg) > len("not a scenario: ") {
		return // the YAML decoder's own message: a line or a field
	}
	for _, where := range []string{"name", "modes", "mode ", "node.", "pods[", "timeline", "expect"} {
		if strings.Contains(msg, where) {
			return
		}
	}
	t.Fatalf("the error %q does not say which part of the file is wrong", msg)
}

// checkScenario states what the engine may assume of a parsed scenario.
func checkScenario(t *testing.T, s *Scenario) {
	t.Helper()
	if s.Name == "" || len(s.Modes) == 0 || len(s.Timeline) == 0 || len(s.Expect) == 0 {
		t.Fatalf("accepted a scenario without name, modes, timeline or expect: %+v", s)
	}
	for _, m := range s.Modes {
		if !contains(KnownModes, m) {
			t.Fatalf("accepted mode %q", m)
		}
	}
	if s.Node.InstanceType == "" || s.Node.KubeletRetries < 0 || s.Node.KubeletRetries > 20 ||
		(s.Node.Start != "full" && s.Node.Start != "fresh") || (s.Node.Start == "fresh" && s.Node.WarmPool == nil) {
		t.Fatalf("accepted node %+v", s.Node)
	}
	declared := map[string]bool{}
	for i, p := range s.Pods {
		ns, name, ok := strings.Cut(p.Name, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") || strings.Contains(p.Name, "*") {
			t.Fatalf("pods[%d]: accepted name %q", i, p.Name)
		}
		if declared[p.Name] {
			t.Fatalf("pods[%d]: %q declared twice", i, p.Name)
		}
		if p.Count != 0 {
			t.Fatalf("pods[%d]: count %d left unexpanded", i, p.Count)
		}
		if p.Device < 0 || p.Device > 15 {
			t.Fatalf("pods[%d]: device %d", i, p.Device)
		}
		declared[p.Name] = true
	}
	for i, e := range s.Timeline {
		actions := 0
		for _, set := range []bool{len(e.Add) > 0, len(e.Delete) > 0, len(e.ForceDelete) > 0, e.Evict != "", e.CancelEviction != "",
			e.Restart != "", e.EC2Fault != nil, e.Failpoint != nil, e.Wait != nil, e.Settle != nil, len(e.LateDel) > 0,
			len(e.RuntimeForgets) > 0, e.GC != nil} {
			if set {
				actions++
			}
		}
		if actions != 1 {
			// An empty pod list is no action: the engine would skip the
			// event (or, for one that also says withoutPrevResult or
			// memory, apply those to nothing).
			ev, _ := json.Marshal(e)
			t.Fatalf("timeline[%d] %s: %d actions, want exactly 1", i, ev, actions)
		}
		for _, m := range e.Modes {
			if !contains(s.Modes, m) {
				t.Fatalf("timeline[%d]: event mode %q is not the scenario's", i, m)
			}
		}
		for _, r := range e.Add {
			switch r.Node {
			case "":
				if !declared[r.Name] || r.ReuseIPOf != "" {
					t.Fatalf("timeline[%d]: add of undeclared pod %+v", i, r)
				}
			case "other":
				if !declared[r.ReuseIPOf] {
					t.Fatalf("timeline[%d]: pod on node other takes the address of undeclared %q", i, r.ReuseIPOf)
				}
			default:
				t.Fatalf("timeline[%d]: add on node %q", i, r.Node)
			}
		}
		for _, n := range append(append([]string{}, e.Delete...), e.ForceDelete...) {
			if !declared[n] {
				t.Fatalf("timeline[%d]: delete of undeclared pod %q", i, n)
			}
		}
		if e.WithoutPrevResult && len(e.Delete) == 0 && len(e.ForceDelete) == 0 {
			t.Fatalf("timeline[%d]: withoutPrevResult without a delete", i)
		}
		if e.Memory != "" && (!contains(KnownMemory, e.Memory) || (e.CancelEviction == "" && e.Restart == "")) {
			t.Fatalf("timeline[%d]: memory %q", i, e.Memory)
		}
		if (e.Evict != "" && e.Evict != "aws-node") || (e.CancelEviction != "" && e.CancelEviction != "aws-node") ||
			(e.Restart != "" && e.Restart != "ipamd") {
			t.Fatalf("timeline[%d]: evict %q, cancel-eviction %q, restart %q", i, e.Evict, e.CancelEviction, e.Restart)
		}
		if fp := e.Failpoint; fp != nil && (fp.Occurrence < 1 || fp.Occurrence > 10000 || !contains([]string{"crash", "error", "hang"}, fp.Action) ||
			(fp.Memory != "" && !contains(KnownMemory, fp.Memory))) {
			t.Fatalf("timeline[%d]: failpoint %+v", i, *fp)
		}
		if ef := e.EC2Fault; ef != nil && (ef.API == "" || ef.Code == "" || ef.Times < 1 || ef.Times > 1000) {
			t.Fatalf("timeline[%d]: ec2-fault %+v", i, *ef)
		}
		if e.Wait != nil && (e.Wait.Duration < 0 || e.Wait.Duration > 24*time.Hour) {
			t.Fatalf("timeline[%d]: wait %v", i, e.Wait.Duration)
		}
	}
	for _, pol := range s.Policies() {
		for _, m := range s.Modes {
			if v, ok := s.Expected(pol, m); !ok || !contains(KnownVerdicts, v) {
				t.Fatalf("expect[%s] in %s: %q", pol, m, v)
			}
		}
	}
}
