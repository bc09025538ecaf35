// Package shardtest is test support for sharded runs (replay explore
// --shard, replay fleet --shard, replay merge): a report's JSON with what
// legitimately differs between the unsharded run and its merged shards
// dropped, so the rest can be compared whole. Only tests import it; it
// lives here, beside the command that merges, because both the explore
// package's tests and the command's use it.
package shardtest

import (
	"encoding/json"
	"testing"
)

// Comparable decodes a report's JSON (v as []byte), or v's own JSON, into
// a map without the time the run took ("took": each machine's speed) and
// which shard it was ("shard": absent from the merged report).
func Comparable(t testing.TB, v any) map[string]any {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a report's JSON: %v", err)
	}
	delete(m, "took")
	delete(m, "shard")
	return m
}
