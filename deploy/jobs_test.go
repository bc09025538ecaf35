package deploy

// What the explorer's and the fleet's Indexed Jobs share: one Job per
// file, strictly decoded; Indexed, never restarted, one container whose
// --shard job/N agrees with the Job's completions and parallelism and
// whose JSON goes alone to stdout; the explore image, replay as its
// entrypoint.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	explorePkg = "./scenarios/cmd/replay"
	exploreExe = "/app/replay"
)

// decodeJob decodes the one Job the manifest at path holds.
func decodeJob(path string, data []byte) (*batchv1.Job, error) {
	objs, err := decodeManifests(path, data)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: %d objects, want the one Job", path, len(objs))
	}
	j, ok := objs[0].obj.(*batchv1.Job)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want a Job", objs[0].where, objs[0].obj)
	}
	return j, nil
}

// shardedJob is a replay Job's container, its args looked up by name, and
// its number of shards (0 when --shard is not job/N).
type shardedJob struct {
	c      corev1.Container
	shards int
}

// arg is --name=value's value, and whether --name is given at all.
func (s shardedJob) arg(name string) (string, bool) {
	for _, a := range s.c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", slices.Contains(s.c.Args, "--"+name)
}

// checkShardedJob reports through bad every way the Job fails to run N
// shards that replay merge combines; ok is false when it has not the one
// container the rest of the checks read.
func checkShardedJob(j *batchv1.Job, bad func(string, ...any)) (sj shardedJob, ok bool) {
	s := &j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		bad("completionMode must be Indexed: each pod needs its JOB_COMPLETION_INDEX to pick its shard")
	}
	if s.Template.Spec.RestartPolicy != "Never" {
		bad("restartPolicy %q: want Never (a shard that found something exits 1 and must not loop)", s.Template.Spec.RestartPolicy)
	}
	if len(s.Template.Spec.Containers) != 1 {
		bad("%d containers, want one", len(s.Template.Spec.Containers))
		return sj, false
	}
	sj.c = s.Template.Spec.Containers[0]
	shard, _ := sj.arg("shard")
	n, err := strconv.Atoi(strings.TrimPrefix(shard, "job/"))
	switch {
	case !strings.HasPrefix(shard, "job/") || err != nil:
		bad("--shard=%q: want job/N (the pod's index picks its shard)", shard)
	case s.Completions == nil || int(*s.Completions) != n:
		bad("completions %v but --shard=job/%d: shards would be missing or out of range", s.Completions, n)
	case s.Parallelism == nil || int(*s.Parallelism) != n:
		bad("parallelism %v but %d shards", s.Parallelism, n)
	default:
		sj.shards = n
	}
	if v, _ := sj.arg("json"); v != "-" {
		bad("--json=%q: want - (stdout carries only the JSON, which kubectl logs collects)", v)
	}
	return sj, true
}

// checkReplayImage: the Dockerfile's explore target runs replay, built
// from its package; the stage is returned for further checks (nil when
// there is none).
func checkReplayImage(b *bundle, bad func(string, ...any)) *stage {
	st, err := b.dockerfile.named("explore")
	if err != nil {
		bad("%v", err)
		return nil
	}
	if !slices.Equal(st.entrypoint, []string{exploreExe}) {
		bad("the explore image's ENTRYPOINT is %q, want [%s] (the Job gives only args)", st.entrypoint, exploreExe)
	}
	if _, err := b.builtAt(st, exploreExe, explorePkg); err != nil {
		bad("%v", err)
	}
	return st
}

// jobEdit breaks a Job's manifest in one way: its first old replaced by
// new must be refused with an error containing want.
type jobEdit struct{ name, old, new, want string }

// checkJobEdits applies each edit to a copy of raw and checks that
// decoding (decodeJob) and check refuse it as the edit says.
func checkJobEdits(t *testing.T, path string, raw []byte, edits []jobEdit, check func(*batchv1.Job) error) {
	t.Helper()
	for _, c := range edits {
		t.Run(c.name, func(t *testing.T) {
			broken := strings.Replace(string(raw), c.old, c.new, 1)
			if broken == string(raw) {
				t.Fatalf("%q is not in the file", c.old)
			}
			j, err := decodeJob(path, []byte(broken))
			if err == nil {
				err = check(j)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
