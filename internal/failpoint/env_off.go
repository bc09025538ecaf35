//go:build !failpoints

package failpoint

// Enabled reports whether this build reads failpoints from the
// environment. It does not: only a build with the "failpoints" tag does.
const Enabled = false

// FromEnv returns nil in a production build: nothing can arm a failpoint
// of a running binary.
func FromEnv() (*Set, error) { return nil, nil }
