package plugin

import (
	"fmt"
	"os"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/machinestate"
)

// TestMain points the default stateDir at a temporary directory: a test
// whose netconf names none must not write records into the machine's
// /var/lib/cni.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vpccni-plugin-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defaultStateDir = dir
	code := machinestate.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
