package checkpoint

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzRead checks that no input makes Read panic or return anything but a
// valid checkpoint or a corrupt/version error, and that whatever it
// accepts can be written back unchanged in meaning. Seeds: testdata/fuzz/FuzzRead.
func FuzzRead(f *testing.F) {
	// One file per worker, rewritten by each input: the fuzz function runs
	// sequentially within a worker, and a directory per input would cost
	// more than Read itself.
	path := filepath.Join(f.TempDir(), "ipam.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Read(path)
		if err != nil {
			if got != nil {
				t.Fatalf("Read returned both a file and %v", err)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("Read error %v (%T) is neither ErrCorrupt nor ErrVersion", err, err)
			}
			return
		}
		if got.Version != Version {
			t.Fatalf("accepted version %q", got.Version)
		}
		keys := map[Key]bool{}
		addrs := map[netip.Addr]bool{}
		for i, a := range got.Allocations {
			ip, err := a.Addr()
			if err != nil {
				t.Fatalf("accepted allocations[%d] whose address does not parse: %v", i, err)
			}
			if a.NetworkName == "" || a.ContainerID == "" || a.IfName == "" {
				t.Fatalf("accepted allocations[%d] with an incomplete key %+v", i, a.Key())
			}
			if keys[a.Key()] {
				t.Fatalf("accepted allocations[%d] whose key %+v repeats", i, a.Key())
			}
			keys[a.Key()] = true
			if addrs[ip] {
				t.Fatalf("accepted allocations[%d] whose address %s repeats", i, ip)
			}
			addrs[ip] = true
		}

		// Whatever Read accepts must survive being written back: the same
		// encoding WriteFile uses (not WriteFile itself, whose fsyncs would
		// slow the fuzzer a hundredfold) must decode to the same checkpoint.
		if err := validateAllocations(got.Allocations); err != nil {
			t.Fatalf("WriteFile would refuse what Read accepted: %v", err)
		}
		encoded, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("encoding an accepted checkpoint: %v", err)
		}
		reread, err := decode("re-encoded", encoded)
		if err != nil {
			t.Fatalf("reading the re-encoded checkpoint %s: %v", encoded, err)
		}
		if len(got.Allocations) == 0 {
			got.Allocations = nil
			reread.Allocations = nil
		}
		if !reflect.DeepEqual(got, reread) {
			t.Fatalf("re-encoded checkpoint differs:\n%+v\n%+v", *got, *reread)
		}
	})
}
