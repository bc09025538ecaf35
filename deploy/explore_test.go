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
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/vpccni/vpccni/scenarios/policy"
)

const exploreJobPath = "deploy/explore/explore-job.yaml"

// checkExploreJob returns every way the Job fails to run one sharded
// exploration whose shards replay merge can combine.
func checkExploreJob(j *batchv1.Job, b *bundle) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	sj, ok := checkShardedJob(j, bad)
	if !ok {
		return errors.Join(errs...)
	}
	if len(sj.c.Args) == 0 || sj.c.Args[0] != "explore" {
		bad("args %q: want explore first", sj.c.Args)
	}
	if _, ok := sj.arg("random"); !ok {
		bad("no --random: a template's exploration would need the template in the image")
	}
	if v, ok := sj.arg("schedules"); !ok || v == "" {
		bad("no --schedules=N: a shard is bounded by a number of schedules")
	}
	if _, ok := sj.arg("for"); ok {
		bad("--for: a timed shard's schedules depend on the machine; replay refuses it with --shard")
	}
	if v, _ := sj.arg("seed"); v == "" {
		bad("no --seed: each pod would draw its own and the shards would be of different runs")
	}
	if v, _ := sj.arg("policy"); v != "" {
		for _, p := range strings.Split(v, ",") {
			if _, err := policy.ByName(p); err != nil {
				bad("--policy: %v", err)
			}
		}
	}
	checkReplayImage(b, bad)
	return errors.Join(errs...)
}

func TestExploreJob(t *testing.T) {
	raw, b := inputs(t, exploreJobPath)
	j, err := decodeJob(exploreJobPath, raw)
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
	checkJobEdits(t, exploreJobPath, raw, []jobEdit{
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
	}, func(j *batchv1.Job) error { return checkExploreJob(j, b) })
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
	j, err := decodeJob(exploreJobPath, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExploreJob(j, &b2); err == nil || !strings.Contains(err.Error(), "ENTRYPOINT") {
		t.Fatalf("an explore image running vpccni-node: %v", err)
	}
}
