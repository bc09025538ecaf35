//go:build !legacydelete

package main

import "github.com/vpccni/vpccni/ipamd"

// legacyProfile leaves cfg as vpccni's in every build but the test-only
// "legacydelete" one (profile_legacy.go).
func legacyProfile(cfg *ipamd.Config) error { return nil }
