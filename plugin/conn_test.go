package plugin

import (
	"path/filepath"
	"testing"

	"google.golang.org/grpc/connectivity"
)

// TestDialSharedOneConnectionPerDEL: a DEL's two dials to ipamd get one
// connection; it closes with the last holder, once, and the next dial
// makes a new one.
func TestDialSharedOneConnectionPerDEL(t *testing.T) {
	target := "unix://" + filepath.Join(t.TempDir(), "ipamd.sock")
	c1, hold1, err := dialShared(target)
	if err != nil {
		t.Fatal(err)
	}
	c2, hold2, err := dialShared(target)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Fatal("two connections for one target")
	}
	hold1.Close()
	hold1.Close() // a second Close of one hold lets go of nothing more
	if c1.GetState() == connectivity.Shutdown {
		t.Fatal("closed while a holder remains")
	}
	hold2.Close()
	if c1.GetState() != connectivity.Shutdown {
		t.Fatalf("still %s after its last holder let go", c1.GetState())
	}
	c3, hold3, err := dialShared(target)
	if err != nil {
		t.Fatal(err)
	}
	defer hold3.Close()
	if c3 == c1 {
		t.Fatal("a closed connection was handed out again")
	}
}
