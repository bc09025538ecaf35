package main

import (
	"os"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/machinestate"
)

// TestMain fails the run if it created the machine's vpc-cni stateDir: a
// replayed or simulated netconf must never write there.
func TestMain(m *testing.M) { os.Exit(machinestate.Main(m)) }
