package deploy

// The explorer's Indexed Job (deploy/explore/explore-job.yaml) is decoded
// strictly and checked against what replay accepts and against the
// Dockerfile's explore target: shards that agree with the Job's
// completions, a bound by schedules (a timed shard's union would depend
// on the machines), JSON alone on stdout for kubectl logs, and an image
// whose entrypoint is replay built from its package.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/vpccni/vpccni/scenarios/policy"
)

const (
	exploreJobPath = "deploy/explore/explore-job.yaml"
	explorePkg     = "./scenarios/cmd/replay"
	exploreExe     = "/app/replay"
)

func decodeExploreJob(data []byte) (*batchv1.Job, error) {
	objs, err := decodeManifests(exploreJobPath, data)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: %d objects, want the one Job", exploreJobPath, len(objs))
	}
	j, ok := objs[0].obj.(*batchv1.Job)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want a Job", objs[0].where, objs[0].obj)
	}
	return j, nil
}

// checkExploreJob returns every way the Job fails to run one sharded
// exploration whose shards replay merge can combine.
func checkExploreJob(j *batchv1.Job, b *bundle) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	s := &j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		bad("completionMode must be Indexed: each pod needs its JOB_COMPLETION_INDEX to pick its shard")
	}
	if s.Template.Spec.RestartPolicy != "Never" {
		bad("restartPolicy %q: want Never (a shard that found a bug exits 1 and must not loop)", s.Template.Spec.RestartPolicy)
	}
	if len(s.Template.Spec.Containers) != 1 {
		bad("%d containers, want one", len(s.Template.Spec.Containers))
		return errors.Join(errs...)
	}
	c := s.Template.Spec.Containers[0]
	arg := func(name string) (string, bool) {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v, true
			}
		}
		return "", slices.Contains(c.Args, "--"+name)
	}
	if len(c.Args) == 0 || c.Args[0] != "explore" {
		bad("args %q: want explore first", c.Args)
	}
	if _, ok := arg("random"); !ok {
		bad("no --random: a template's exploration would need the template in the image")
	}
	shard, _ := arg("shard")
	n, err := strconv.Atoi(strings.TrimPrefix(shard, "job/"))
	switch {
	case !strings.HasPrefix(shard, "job/") || err != nil:
		bad("--shard=%q: want job/N (the pod's index picks its shard)", shard)
	case s.Completions == nil || int(*s.Completions) != n:
		bad("completions %v but --shard=job/%d: shards would be missing or out of range", s.Completions, n)
	case s.Parallelism == nil || int(*s.Parallelism) != n:
		bad("parallelism %v but %d shards", s.Parallelism, n)
	}
	if v, ok := arg("schedules"); !ok || v == "" {
		bad("no --schedules=N: a shard is bounded by a number of schedules")
	}
	if _, ok := arg("for"); ok {
		bad("--for: a timed shard's schedules depend on the machine; replay refuses it with --shard")
	}
	if v, _ := arg("seed"); v == "" {
		bad("no --seed: each pod would draw its own and the shards would be of different runs")
	}
	if v, _ := arg("json"); v != "-" {
		bad("--json=%q: want - (stdout carries only the JSON, which kubectl logs collects)", v)
	}
	if v, _ := arg("policy"); v != "" {
		for _, p := range strings.Split(v, ",") {
			if _, err := policy.ByName(p); err != nil {
				bad("--policy: %v", err)
			}
		}
	}
	st, err := b.dockerfile.named("explore")
	if err != nil {
		bad("%v", err)
	} else {
		if !slices.Equal(st.entrypoint, []string{exploreExe}) {
			bad("the explore image's ENTRYPOINT is %q, want [%s] (the Job gives only args)", st.entrypoint, exploreExe)
		}
		if _, err := b.builtAt(st, exploreExe, explorePkg); err != nil {
			bad("%v", err)
		}
	}
	return errors.Join(errs...)
}

func TestExploreJob(t *testing.T) {
	raw, b := inputs(t, exploreJobPath)
	j, err := decodeExploreJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExploreJob(j, b); err != nil {
		t.Fatal(err)
	}
}

// Every check of the Job can fail: each copy is broken in one way.
func TestExploreJobBrokenCopies(t *testing.T) {
	raw, b := inputs(t, exploreJobPath)
	for _, c := range []struct{ name, old, new, want string }{
		{"misspelt field", "completionMode:", "completionmode:", "unknown field"},
		{"not indexed", "completionMode: Indexed", "completionMode: NonIndexed", "completionMode must be Indexed"},
		{"fewer completions", "completions: 8", "completions: 7", "completions"},
		{"less parallel", "parallelism: 8", "parallelism: 4", "parallelism"},
		{"fixed shard", "--shard=job/8", "--shard=1/8", "want job/N"},
		{"timed", "--schedules=200000", "--for=1h", "no --schedules"},
		{"no seed", "            - --seed=2048\n", "", "no --seed"},
		{"json to a file", "--json=-", "--json=/tmp/out.json", "want -"},
		{"unknown policy", "ref-v1.10", "ref-v0.1", "unknown delete policy"},
		{"restarts", "restartPolicy: Never", "restartPolicy: OnFailure", "restartPolicy"},
		{"systematic", "            - --random\n", "", "no --random"},
	} {
		t.Run(c.name, func(t *testing.T) {
			broken := strings.Replace(string(raw), c.old, c.new, 1)
			if broken == string(raw) {
				t.Fatalf("%q is not in the file", c.old)
			}
			j, err := decodeExploreJob([]byte(broken))
			if err == nil {
				err = checkExploreJob(j, b)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	// The image: an explore target whose entrypoint is not replay.
	d := *b.dockerfile
	d.stages = slices.Clone(d.stages)
	for i, st := range d.stages {
		if st.name == "explore" {
			cp := *st
			cp.entrypoint = []string{"/app/vpccni-node"}
			d.stages[i] = &cp
		}
	}
	b2 := *b
	b2.dockerfile = &d
	j, err := decodeExploreJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExploreJob(j, &b2); err == nil || !strings.Contains(err.Error(), "ENTRYPOINT") {
		t.Fatalf("an explore image running vpccni-node: %v", err)
	}
}
