package main

import (
	"strings"
	"testing"
)

// TestIptablesCommand: a named iptables command that is not there stops
// ipamd with the command's name in the message.
func TestIptablesCommand(t *testing.T) {
	n := natFlags{randomize: "prng", mark: "0x80", nodePort: true, command: "/nonexistent/iptables-nft"}
	_, err := n.hostNAT("eni")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/iptables-nft") {
		t.Fatalf("hostNAT with a missing command: %v", err)
	}
}
