package deploy

// The fleet's Indexed Job (deploy/explore/fleet-job.yaml) is decoded
// strictly and checked against what replay fleet accepts and against the
// Dockerfile's explore target: shards that agree with the Job's
// completions and have runs to do, JSON alone on stdout, a fleet file the
// image holds and that loads, an image whose entrypoint is replay.

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/vpccni/vpccni/scenarios/spec"
)

const (
	fleetJobPath   = "deploy/explore/fleet-job.yaml"
	fleetsInImage  = "/app/fleets/"
	fleetsInSource = "scenarios/fleets/"
)

func decodeFleetJob(data []byte) (*batchv1.Job, error) {
	objs, err := decodeManifests(fleetJobPath, data)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: %d objects, want the one Job", fleetJobPath, len(objs))
	}
	j, ok := objs[0].obj.(*batchv1.Job)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want a Job", objs[0].where, objs[0].obj)
	}
	return j, nil
}

// checkFleetJob returns every way the Job fails to run one sharded fleet
// run whose shards replay merge can combine.
func checkFleetJob(j *batchv1.Job, b *bundle) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	s := &j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		bad("completionMode must be Indexed: each pod needs its JOB_COMPLETION_INDEX to pick its shard")
	}
	if s.Template.Spec.RestartPolicy != "Never" {
		bad("restartPolicy %q: want Never (a shard whose runs found something exits 1 and must not loop)", s.Template.Spec.RestartPolicy)
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
	if len(c.Args) < 2 || c.Args[0] != "fleet" {
		bad("args %q: want fleet first and the fleet file last", c.Args)
		return errors.Join(errs...)
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
	if v, _ := arg("json"); v != "-" {
		bad("--json=%q: want - (stdout carries only the JSON, which kubectl logs collects)", v)
	}
	// The fleet file: in the image under /app/fleets/, from
	// scenarios/fleets/, and a fleet replay loads.
	file := c.Args[len(c.Args)-1]
	var fleet *spec.Fleet
	if name, ok := strings.CutPrefix(file, fleetsInImage); !ok || strings.HasPrefix(file, "-") {
		bad("the last arg %q is not a fleet file under %s (the image holds scenarios/fleets/ there)", file, fleetsInImage)
	} else if fleet, err = spec.LoadFleet(filepath.Join(repoRoot, fleetsInSource, name)); err != nil {
		bad("the fleet file: %v", err)
	}
	seeds := 1
	if v, ok := arg("seeds"); ok {
		if seeds, err = strconv.Atoi(v); err != nil || seeds < 1 {
			bad("--seeds=%q: want a whole number of seeds", v)
		}
	}
	if fleet != nil && n > 0 {
		runs := seeds * len(fleet.Policies())
		if v, _ := arg("policy"); v != "" {
			runs = seeds
		}
		if runs < n {
			bad("%d runs (seeds × policies) for %d shards: some pods would have nothing to run", runs, n)
		}
	}
	st, err := b.dockerfile.named("explore")
	if err != nil {
		bad("%v", err)
		return errors.Join(errs...)
	}
	if !slices.Equal(st.entrypoint, []string{exploreExe}) {
		bad("the explore image's ENTRYPOINT is %q, want [%s] (the Job gives only args)", st.entrypoint, exploreExe)
	}
	if _, err := b.builtAt(st, exploreExe, explorePkg); err != nil {
		bad("%v", err)
	}
	holds := slices.ContainsFunc(st.copies, func(cp copyInstr) bool {
		return path.Clean(cp.dest) == path.Clean(fleetsInImage) &&
			slices.ContainsFunc(cp.srcs, func(src string) bool { return strings.HasSuffix(path.Clean(src), path.Clean(fleetsInSource)) })
	})
	if !holds {
		bad("the explore image does not copy %s to %s: the Job's fleet file is not in it", fleetsInSource, fleetsInImage)
	}
	return errors.Join(errs...)
}

func TestFleetJob(t *testing.T) {
	raw, b := inputs(t, fleetJobPath)
	j, err := decodeFleetJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFleetJob(j, b); err != nil {
		t.Fatal(err)
	}
}

// Every check of the Job can fail: each copy is broken in one way.
func TestFleetJobBrokenCopies(t *testing.T) {
	raw, b := inputs(t, fleetJobPath)
	for _, c := range []struct{ name, old, new, want string }{
		{"misspelt field", "completionMode:", "completionmode:", "unknown field"},
		{"not indexed", "completionMode: Indexed", "completionMode: NonIndexed", "completionMode must be Indexed"},
		{"fewer completions", "completions: 8", "completions: 7", "completions"},
		{"less parallel", "parallelism: 8", "parallelism: 4", "parallelism"},
		{"fixed shard", "--shard=job/8", "--shard=1/8", "want job/N"},
		{"json to a file", "--json=-", "--json=/tmp/out.json", "want -"},
		{"too few seeds", "--seeds=16", "--seeds=3", "some pods would have nothing"},
		{"file not in the image", "/app/fleets/autoscaler-20-nodes-hour.yaml", "/data/autoscaler-20-nodes-hour.yaml", "not a fleet file under"},
		{"no such fleet", "autoscaler-20-nodes-hour.yaml", "autoscaler-7-nodes.yaml", "the fleet file"},
		{"restarts", "restartPolicy: Never", "restartPolicy: OnFailure", "restartPolicy"},
		{"explore", "            - fleet\n", "            - explore\n", "want fleet first"},
	} {
		t.Run(c.name, func(t *testing.T) {
			broken := strings.Replace(string(raw), c.old, c.new, 1)
			if broken == string(raw) {
				t.Fatalf("%q is not in the file", c.old)
			}
			j, err := decodeFleetJob([]byte(broken))
			if err == nil {
				err = checkFleetJob(j, b)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	// The image: an explore target without the fleet files.
	d := *b.dockerfile
	d.stages = slices.Clone(d.stages)
	for i, st := range d.stages {
		if st.name == "explore" {
			cp := *st
			cp.copies = slices.DeleteFunc(slices.Clone(cp.copies), func(c copyInstr) bool { return c.dest == fleetsInImage })
			d.stages[i] = &cp
		}
	}
	b2 := *b
	b2.dockerfile = &d
	j, err := decodeFleetJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFleetJob(j, &b2); err == nil || !strings.Contains(err.Error(), "does not copy") {
		t.Fatalf("an explore image without the fleets: %v", err)
	}
}
