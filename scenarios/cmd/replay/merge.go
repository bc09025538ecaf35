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

const mergeUsage = `replay merge — combine the shards of one exploration or fleet run

Usage:
  replay merge [--json FILE] SHARD.json...

Each SHARD.json is the --json output of 'replay explore --shard K/N' or of
'replay fleet --shard K/N' (all N shards of one run, each once: the same
template, or the same --random seed, --schedules, --mode and --policy; for
a fleet the same file content, --seed, --seeds and --policy). The merged
report is exactly the unsharded run's: for an exploration the matrix
summed and the outcomes (failures) in schedule order, printed as the
matrix; for a fleet every run in order, printed as the table 'replay
fleet' prints. --json FILE ("-": stdout) writes the merged report in the
format the unsharded run's --json writes.

Exit status: 0 when vpccni's own flow (default) is clean in every shard's
schedules, or for a fleet when every run gave what the file expects; 1
when not; 2 when the files are not the shards of one run (which shard is
missing, given twice, of another run or not a whole shard is named) or
mix explorations and fleets.
`

// shardFile is what a shard's JSON holds, enough to tell which kind.
type shardFile struct {
	Seed     *uint64 `json:"seed"`
	Template *string `json:"template"`
	Fleet    *string `json:"fleet"`
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
	var fleets []shardNamed
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		var kind shardFile
		if err := json.Unmarshal(b, &kind); err != nil {
			fmt.Fprintf(stderr, "replay merge: %s: not the JSON of 'replay explore' or 'replay fleet' --shard: %v\n", path, err)
			return exitUsage
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		switch {
		case kind.Fleet != nil:
			var r fleetReport
			err = dec.Decode(&r)
			fleets = append(fleets, shardNamed{path, &r})
		case kind.Seed != nil:
			var r explore.RandomReport
			err = dec.Decode(&r)
			randoms = append(randoms, &r)
		case kind.Template != nil:
			var r explore.Report
			err = dec.Decode(&r)
			systematic = append(systematic, &r)
		default:
			err = fmt.Errorf("neither a --random exploration (seed), a template's (template) nor a fleet's (fleet)")
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
	if len(fleets) > 0 && len(randoms)+len(systematic) > 0 {
		fmt.Fprintf(stderr, "replay merge: the files mix fleet runs (%s) and explorations\n", fleets[0].path)
		return exitUsage
	}
	text := stdout
	if *jsonOut == "-" {
		text = io.Discard
	}
	var merged any
	failed := false
	switch {
	case len(fleets) > 0:
		r, err := mergeFleet(fleets)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		printFleetTable(text, r.results())
		fmt.Fprintf(text, "\n%d runs of %s from %d shards, seeds %s\n", len(r.Runs), r.Fleet, len(fleets), seedList(r.Seeds))
		merged, failed = r, r.failed()
	case len(randoms) > 0:
		r, err := explore.MergeRandom(randoms)
		if err != nil {
			fmt.Fprintln(stderr, "replay merge:", err)
			return exitUsage
		}
		printMatrix(text, r.Matrix)
		fmt.Fprintf(text, "\n%d schedules of %d from %d shards, seed %d (longest shard %s)\n", r.Schedules, r.Of, len(randoms), r.Seed, r.Took.Round(time.Millisecond))
		merged, failed = r, r.Failed()
	default:
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

// shardOf reads a command's --shard; "" is the whole run. A bad value is
// named on stderr under the command's name (ok false: exit 2).
func shardOf(cmd, s string, stderr io.Writer) (shard explore.Shard, ok bool) {
	if s == "" {
		return explore.Shard{}, true
	}
	shard, err := parseShard(s)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --shard: %v\n", cmd, err)
		return explore.Shard{}, false
	}
	return shard, true
}

// shardNote says which shard a run was, of how many schedules.
func shardNote(s *explore.Shard, of int) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf(", shard %s of %d schedules (replay merge combines the shards)", s, of)
}
