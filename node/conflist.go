package node

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/containernetworking/cni/libcni"

	"github.com/vpccni/vpccni/plugin"
)

// ConflistName is the reference's file name: a node moving from the
// reference to vpccni (or back) has its conflist replaced, not a second
// one beside it that the runtime would ignore or prefer.
const ConflistName = "10-aws.conflist"

// NetworkName is the network's name in the conflist, the reference's: the
// runtime keys its cached results and kubelet its pod network status by it.
const NetworkName = "aws-cni"

// CNIVersion is the conflist's: 1.0.0, which containerd 1.6 and later and
// CRI-O speak (CHECK, and prevResult on DEL).
const CNIVersion = "1.0.0"

// Conflist is the node's CNI configuration for s: vpc-cni, then portmap
// (hostPort), then bandwidth and tuning when asked, as the reference
// chains them. It is checked as vpc-cni and libcni will read it, so a
// conflist the plugin would refuse on every ADD is never written.
func Conflist(s Settings) ([]byte, error) {
	vpc := map[string]any{
		"name":               NetworkName,
		"type":               "vpc-cni",
		"vethPrefix":         s.VethPrefix,
		"mtu":                strconv.Itoa(s.PodMTU),
		"podSGEnforcingMode": s.SGMode,
		"pluginLogLevel":     s.PluginLogLevel,
	}
	if s.PluginLogFile != "" {
		vpc["pluginLogFile"] = s.PluginLogFile
	}
	if s.IpamdAddress != "" {
		vpc["ipamdAddress"] = s.IpamdAddress
	}
	if s.JournalFile != "" {
		vpc["journalFile"] = s.JournalFile
	}
	plugins := []any{vpc, map[string]any{
		"type":         "portmap",
		"capabilities": map[string]bool{"portMappings": true},
		// SNAT of hairpin traffic: a pod reaching its own node's hostPort.
		"snat": true,
	}}
	if s.Bandwidth {
		plugins = append(plugins, map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}})
	}
	if s.NoPodV6 {
		plugins = append(plugins, map[string]any{"type": "tuning", "sysctl": map[string]string{
			"net.ipv6.conf.all.disable_ipv6":     "1",
			"net.ipv6.conf.default.disable_ipv6": "1",
			"net.ipv6.conf.lo.disable_ipv6":      "1",
		}})
	}
	b, err := json.MarshalIndent(map[string]any{"cniVersion": CNIVersion, "name": NetworkName, "plugins": plugins}, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if err := check(b); err != nil {
		return nil, fmt.Errorf("the conflist for these settings would be refused: %w", err)
	}
	return b, nil
}

// check reads a conflist as the runtime (libcni) and then vpc-cni would.
func check(b []byte) error {
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return err
	}
	for _, p := range list.Plugins {
		if p.Network.Type != "vpc-cni" {
			continue
		}
		// vpc-cni is given its entry with the list's name and version,
		// as libcni injects them.
		var conf map[string]any
		if err := json.Unmarshal(p.Bytes, &conf); err != nil {
			return err
		}
		conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
		entry, err := json.Marshal(conf)
		if err != nil {
			return err
		}
		_, err = plugin.LoadNetConf(entry)
		return err
	}
	return fmt.Errorf("no vpc-cni entry")
}
