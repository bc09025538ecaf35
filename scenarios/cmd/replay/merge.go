package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vpccni/vpccni/scenarios/explore"
)

const mergeUsage = `replay merge — combine the shards of one exploration

Usage:
  replay merge [--json FILE] SHARD.json...

Each SHARD.json is the --json output of 'replay explore --shard K/N' (all
N shards of one run, each once: the same template, or the same --random
seed, --schedules, --mode and --policy). The merged report is exactly the
unsharded run's: the matrix summed, the outcomes (failures) in schedule
order. It prints the matrix; --json FILE ("-": stdout) writes the merged
report in the format 'replay explore --json' writes.

Exit status: 0 when vpccni's own flow (default) is clean in every shard's
schedules, 1 when it is not, 2 when the files are not the shards of one run
(which shard is missing, given twice or of another run is named).
`

// shardFile is what a shard's JSON holds, enough to tell which kind.
type shardFile struct {
	Seed     *uint64 `json:"seed"`
	Template *string `json:"template"`
}

func runMerge(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay merge", flag.ContinueOnError)
	jsonOut := fs.String("json", "", "")
	if code, ok := parseFlags(fs, args, func(w io.Writer) { fmt.Fprint(w, mergeUsage) }, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "replay merge: give the shards' JSON files (replay merge --help)")
		return exitUsage
	}
	var randoms []*explore.RandomReport
	var systematic []*explore.Report
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		var kind shardFile
		if err := json.Unmarshal(b, &kind); err != nil {
			fmt.Fprintf(stderr, "replay merge: %s: not an exploration's JSON: %v\n", path, err)
			return exitUsage
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		switch {
		case kind.Seed != nil:
			var r explore.RandomReport
			err = dec.Decode(&r)
			randoms = append(randoms, &r)
		case kind.Template != nil:
			var r explore.Report
			err = dec.Decode(&r)
			systematic = append(systematic, &r)
		default:
			err = fmt.Errorf("neither a --random exploration (seed) nor a template's (template)")
		}
		if err != nil {
			fmt.Fprintf(stderr, "replay merge: %s: %v\n", path, err)
			return exitUsage
		}
	}
	if len(randoms) > 0 && len(systematic) > 0 {
		fmt.Fprintln(stderr, "replay merge: the files mix --random explorations and a template's")
		return exitUsage
	}
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	var merged any
	failed := false
	if len(randoms) > 0 {
		r, err := explore.MergeRandom(randoms)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		printMatrix(text, r.Matrix)
		fmt.Fprintf(text, "\n%d schedules of %d from %d shards, seed %d (longest shard %s)\n", r.Schedules, r.Of, len(randoms), r.Seed, r.Took.Round(time.Millisecond))
		merged, failed = r, r.Failed()
	} else {
		r, err := explore.MergeSystematic(systematic)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		printMatrix(text, r.Matrix())
		fmt.Fprintf(text, "\n%d schedules of %s from %d shards\n", r.Schedules, r.Template, len(systematic))
		for _, o := range r.Outcomes {
			failed = failed || o.Policy == "default" && o.Failed()
		}
		merged = r
	}
	if *jsonOut != "" {
		if err := writeReportJSON(*jsonOut, stdout, merged); err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
	}
	if failed {
		return exitMismatch
	}
	return exitOK
}

// parseShard reads --shard K/N; K "job" is the pod's index in a
// Kubernetes Indexed Job (JOB_COMPLETION_INDEX, from 0) plus one: its
// manifest cannot add one without a shell, which the image has not.
func parseShard(s string) (explore.Shard, error) {
	if n, ok := strings.CutPrefix(s, "job/"); ok {
		idx := os.Getenv("JOB_COMPLETION_INDEX")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			return explore.Shard{}, fmt.Errorf("shard %q: JOB_COMPLETION_INDEX is %q, not an index from 0 (is this an Indexed Job's pod?)", s, idx)
		}
		s = strconv.Itoa(i+1) + "/" + n
	}
	return explore.ParseShard(s)
}

// shardNote says which shard a run was, of how many schedules.
func shardNote(s *explore.Shard, of int) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf(", shard %s of %d schedules (replay merge combines the shards)", s, of)
}
