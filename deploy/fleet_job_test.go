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

// checkFleetJob returns every way the Job fails to run one sharded fleet
// run whose shards replay merge can combine.
func checkFleetJob(j *batchv1.Job, b *bundle) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	sj, ok := checkShardedJob(j, bad)
	if !ok {
		return errors.Join(errs...)
	}
	args := sj.c.Args
	if len(args) < 2 || args[0] != "fleet" {
		bad("args %q: want fleet first and the fleet file last", args)
		return errors.Join(errs...)
	}
	// The fleet file: in the image under /app/fleets/, from
	// scenarios/fleets/, and a fleet replay loads.
	file := args[len(args)-1]
	var fleet *spec.Fleet
	var err error
	if name, ok := strings.CutPrefix(file, fleetsInImage); !ok {
		bad("the last arg %q is not a fleet file under %s (the image holds scenarios/fleets/ there)", file, fleetsInImage)
	} else if fleet, err = spec.LoadFleet(filepath.Join(repoRoot, fleetsInSource, name)); err != nil {
		bad("the fleet file: %v", err)
	}
	seeds := 1
	if v, ok := sj.arg("seeds"); ok {
		if seeds, err = strconv.Atoi(v); err != nil || seeds < 1 {
			bad("--seeds=%q: want a whole number of seeds", v)
		}
	}
	if fleet != nil && sj.shards > 0 {
		runs := seeds * len(fleet.Policies())
		if v, _ := sj.arg("policy"); v != "" {
			runs = seeds
		}
		if runs < sj.shards {
			bad("%d runs (seeds × policies) for %d shards: some pods would have nothing to run", runs, sj.shards)
		}
	}
	st := checkReplayImage(b, bad)
	if st == nil {
		return errors.Join(errs...)
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
	j, err := decodeJob(fleetJobPath, raw)
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
	checkJobEdits(t, fleetJobPath, raw, []jobEdit{
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
	}, func(j *batchv1.Job) error { return checkFleetJob(j, b) })
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
	j, err := decodeJob(fleetJobPath, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFleetJob(j, &b2); err == nil || !strings.Contains(err.Error(), "does not copy") {
		t.Fatalf("an explore image without the fleets: %v", err)
	}
}
