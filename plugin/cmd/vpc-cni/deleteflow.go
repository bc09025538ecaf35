//go:build !legacydelete

package main

import "github.com/vpccni/vpccni/plugin"

// deleteFlow is vpccni's (nil) in every build but the test-only
// "legacydelete" one (deleteflow_legacy.go).
func deleteFlow() (func(*plugin.Plugin, *plugin.DelRequest) error, error) { return nil, nil }
