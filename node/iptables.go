package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// iptables 1.8 comes in two modes that write to two different kernel
// subsystems: "legacy" (the x_tables API) and "nft" (nftables). Rules
// written in one mode are invisible to the other and are ordered apart
// from it, so ipamd must write its SNAT and connmark rules in the mode the
// node's kubelet and kube-proxy use. The image has both; IptablesMode
// picks one as the kubernetes-sigs iptables wrappers do.
const (
	ModeLegacy = "legacy"
	ModeNFT    = "nft"
	// ModeAuto picks legacy or nft from what the node holds; ModePath
	// leaves ipamd with whichever iptables its PATH finds.
	ModeAuto = "auto"
	ModePath = "path"
)

// kubeletHints are the chains kubelet (1.17 and later) makes in the mode
// the node uses, for containers like this one to find it by.
var kubeletHints = []string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// Saver runs `<family>tables-<mode>-save` (family "ip" or "ip6") and
// returns what it printed.
type Saver func(ctx context.Context, family, mode string) (string, error)

// ExecSaver runs the save commands found on PATH; a command that is not
// there is an error wrapping exec.ErrNotFound.
func ExecSaver(ctx context.Context, family, mode string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, family+"tables-"+mode+"-save").Output()
	return string(out), err
}

// ModeChoice is the mode picked and why, for the log.
type ModeChoice struct {
	Mode       string
	Why        string
	Legacy, NF int // the rules each mode holds (IPv4 and IPv6)
}

// PickIptablesMode picks the node's mode: the one holding kubelet's hint
// chain (nft when both do); else the one holding more rules; nft on a tie
// (a node with no rules yet: nft is what current distributions use). A
// mode whose save command fails is out; when both fail, the error says
// why.
func PickIptablesMode(ctx context.Context, save Saver) (ModeChoice, error) {
	type seen struct {
		rules int
		hint  bool
		err   error
	}
	look := func(mode string) seen {
		var s seen
		for _, family := range []string{"ip", "ip6"} {
			out, err := save(ctx, family, mode)
			if err != nil {
				if family == "ip" {
					s.err = fmt.Errorf("%stables-%s-save: %w", family, mode, err)
				}
				continue
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "-A ") {
					s.rules++
				}
				for _, h := range kubeletHints {
					if line == ":"+h || strings.HasPrefix(line, ":"+h+" ") || line == "-N "+h {
						s.hint = true
					}
				}
			}
		}
		return s
	}
	legacy, nft := look(ModeLegacy), look(ModeNFT)
	c := ModeChoice{Legacy: legacy.rules, NF: nft.rules}
	switch {
	case legacy.err != nil && nft.err != nil:
		return c, errors.Join(legacy.err, nft.err)
	case nft.err != nil:
		c.Mode, c.Why = ModeLegacy, "only legacy answers"
	case legacy.err != nil:
		c.Mode, c.Why = ModeNFT, "only nft answers"
	case nft.hint:
		c.Mode, c.Why = ModeNFT, "kubelet's hint chain is in nft"
	case legacy.hint:
		c.Mode, c.Why = ModeLegacy, "kubelet's hint chain is in legacy"
	case legacy.rules > nft.rules:
		c.Mode, c.Why = ModeLegacy, "legacy holds more rules"
	default:
		c.Mode, c.Why = ModeNFT, "nft holds as many rules or more"
	}
	return c, nil
}

// IptablesCommand is the iptables command of a mode, found on PATH.
func IptablesCommand(mode string) (string, error) {
	return exec.LookPath("iptables-" + mode)
}
