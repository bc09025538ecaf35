package checkpoint

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestWriteTempSyncsBeforeClose: the temporary file is fsynced before it is
// renamed over the checkpoint (else a power cut after the rename can leave
// an empty checkpoint and every pod forgotten). A pipe accepts the chmod
// and the write but not fsync (EINVAL), so a writeTemp that syncs fails
// with "fsync" and one that skips it does not.
func TestWriteTempSyncsBeforeClose(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go io.Copy(io.Discard, r)
	err = writeTemp(w, File{Version: Version, Allocations: []Allocation{}})
	w.Close()
	if err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Fatalf("writeTemp on a file that cannot be fsynced: %v, want an fsync error", err)
	}
}
