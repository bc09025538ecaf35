//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
)

// Enabled reports whether this build reads failpoints from the
// environment: a "failpoints" build, for the real-kernel suite.
const Enabled = true

// FromEnv arms the points VPCCNI_FAILPOINTS names
// ("driver/del-rule-to-pod=crash@1,…"); nil when it is unset.
func FromEnv() (*Set, error) {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return nil, nil
	}
	s, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	// A crash is the process's death with nothing run after it; a hang
	// blocks until the runtime kills the process.
	s.OnStop = func(f *Fault) {
		fmt.Fprintln(os.Stderr, f.Error())
		if f.Action == Hang {
			select {}
		}
		os.Exit(137)
	}
	return s, nil
}
