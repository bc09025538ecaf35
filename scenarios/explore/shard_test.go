package explore

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/scenarios/cmd/replay/shardtest"
)

func TestParseShard(t *testing.T) {
	if s, err := ParseShard("2/8"); err != nil || s != (Shard{2, 8}) {
		t.Fatalf("2/8: %v %v", s, err)
	}
	for _, bad := range []string{"", "3", "0/2", "3/2", "1/0", "a/b", "1/20000", "-1/2"} {
		if _, err := ParseShard(bad); err == nil || !strings.Contains(err.Error(), "want K/N") {
			t.Errorf("%q: got %v, want an error naming K/N", bad, err)
		}
	}
}

// The shards of a randomized exploration, merged, are the unsharded run.
func TestRandomShardsMergeToTheWhole(t *testing.T) {
	opt := RandomOptions{Seed: 7, Schedules: 30, Policies: []string{"default", "ref-v1.11"}}
	whole, err := RunRandom(opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Failures) == 0 {
		t.Fatal("the run finds nothing: the test would not see failures lost or doubled by a merge")
	}
	var shards []*RandomReport
	for _, k := range []int{3, 1, 2} { // in any order
		o := opt
		o.Shard = Shard{k, 3}
		r, err := RunRandom(o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Schedules == whole.Schedules {
			t.Fatalf("shard %d ran every schedule", k)
		}
		shards = append(shards, r)
	}
	merged, err := MergeRandom(shards)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shardtest.Comparable(t, merged), shardtest.Comparable(t, whole); !reflect.DeepEqual(got, want) {
		t.Fatalf("merged shards differ from the whole run:\n%v\n%v", got, want)
	}
	if _, err := MergeRandom(shards[:2]); err == nil || !strings.Contains(err.Error(), "missing: 2/3") {
		t.Errorf("two of three shards: %v", err)
	}
	if _, err := MergeRandom(append(shards, shards[0])); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a shard twice: %v", err)
	}
	other := *shards[1]
	other.Seed = 8
	if _, err := MergeRandom([]*RandomReport{shards[0], &other, shards[2]}); err == nil || !strings.Contains(err.Error(), "of another run") {
		t.Errorf("a shard of another seed: %v", err)
	}
	if _, err := MergeRandom([]*RandomReport{whole}); err == nil || !strings.Contains(err.Error(), "without --shard") {
		t.Errorf("an unsharded run: %v", err)
	}
	if _, err := RunRandom(RandomOptions{Seed: 7, Duration: 1, Shard: Shard{1, 2}}); err == nil {
		t.Error("a sharded run bounded by time was accepted")
	}
}

// The shards of a template's exploration, merged, are the unsharded run.
func TestSystematicShardsMergeToTheWhole(t *testing.T) {
	tpl := template(t)
	opt := Options{Modes: []string{"ipv4"}, Policies: []string{"default", "ref-v1.11"}, Actions: []failpoint.Action{failpoint.Crash},
		Memories: []string{"lost"}, MaxOccurrences: 1}
	scheds, err := Enumerate(tpl, opt)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Run(tpl, scheds, opt)
	if err != nil {
		t.Fatal(err)
	}
	var shards []*Report
	for k := 1; k <= 2; k++ {
		o := opt
		o.Shard = Shard{k, 2}
		r, err := Run(tpl, scheds, o)
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, r)
	}
	merged, err := MergeSystematic(shards)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shardtest.Comparable(t, merged), shardtest.Comparable(t, whole); !reflect.DeepEqual(got, want) {
		t.Fatalf("merged shards differ from the whole run (%d and %d schedules)", merged.Schedules, whole.Schedules)
	}
	if len(whole.Failures()) == 0 {
		t.Fatal("nothing fails: the comparison would not see a failure lost")
	}
}
