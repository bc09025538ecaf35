// Package failpoints links every component that registers failpoints
// (ipamd, the plugin and its driver), so that a scenario file's failpoint
// names are checked against this build's whoever reads the file: the
// scenario reader (scenarios/spec) imports it, the engine need not set
// anything.
package failpoints

import (
	"github.com/vpccni/vpccni/internal/failpoint"

	// Each registers its failpoints when linked.
	_ "github.com/vpccni/vpccni/ipamd"
	_ "github.com/vpccni/vpccni/plugin"
	_ "github.com/vpccni/vpccni/plugin/driver"
)

// Known reports whether name is a failpoint of this build.
func Known(name string) bool { return failpoint.Known(failpoint.Name(name)) }
