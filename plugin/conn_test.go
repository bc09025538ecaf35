package plugin

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/internal/unarygrpc"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// closed tells a closed connection from an open one by a call (there is
// no server: an open one fails to connect).
func closed(c *unarygrpc.Conn) bool {
	_, err := rpc.NewCNIBackendClient(c).DelNetwork(context.Background(), &rpc.DelNetworkRequest{})
	return status.Code(err) == codes.Canceled
}

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
	if closed(c1) {
		t.Fatal("closed while a holder remains")
	}
	hold2.Close()
	if !closed(c1) {
		t.Fatal("still open after its last holder let go")
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
