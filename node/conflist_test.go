package node

import (
	"encoding/json"
	"strings"
	"testing"
)

type conflist struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

func parse(t *testing.T, b []byte) conflist {
	t.Helper()
	var c conflist
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return c
}

// TestConflistDefaults: the reference's network, vpc-cni with the
// settings, then portmap with hostPort SNAT; nothing else.
func TestConflistDefaults(t *testing.T) {
	s, _ := SettingsFromEnv(env())
	b, err := Conflist(s)
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, b)
	if c.CNIVersion != "1.0.0" || c.Name != "aws-cni" || len(c.Plugins) != 2 {
		t.Fatalf("%s", b)
	}
	vpc := c.Plugins[0]
	for k, want := range map[string]any{"type": "vpc-cni", "name": "aws-cni", "vethPrefix": "eni", "mtu": "9001", "podSGEnforcingMode": "strict",
		"pluginLogFile": "/var/log/aws-routed-eni/plugin.log", "pluginLogLevel": "Debug"} {
		if vpc[k] != want {
			t.Errorf("vpc-cni %s = %v, want %v", k, vpc[k], want)
		}
	}
	if _, ok := vpc["ipamdAddress"]; ok {
		t.Error("ipamdAddress written for the default socket")
	}
	pm := c.Plugins[1]
	if pm["type"] != "portmap" || pm["snat"] != true || pm["capabilities"].(map[string]any)["portMappings"] != true {
		t.Errorf("portmap entry %v", pm)
	}
}

// TestConflistChains: bandwidth, then tuning with IPv6 off in the pod,
// after portmap; the socket and a stderr plugin log as vpc-cni takes them.
func TestConflistChains(t *testing.T) {
	s, _ := SettingsFromEnv(env(EnvBandwidth, "true", EnvNoPodV6, "true", EnvPluginLogFile, "stderr", EnvPodMTU, "1500",
		EnvJournalFile, "/var/log/j.jsonl"))
	s.IpamdAddress = "unix:///run/x/ipamd.sock"
	b, err := Conflist(s)
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, b)
	var types []string
	for _, p := range c.Plugins {
		types = append(types, p["type"].(string))
	}
	if strings.Join(types, ",") != "vpc-cni,portmap,bandwidth,tuning" {
		t.Fatalf("chain %v", types)
	}
	vpc := c.Plugins[0]
	if vpc["mtu"] != "1500" || vpc["ipamdAddress"] != "unix:///run/x/ipamd.sock" || vpc["pluginLogFile"] != nil ||
		vpc["journalFile"] != "/var/log/j.jsonl" {
		t.Errorf("vpc-cni entry %v", vpc)
	}
	if c.Plugins[2]["capabilities"].(map[string]any)["bandwidth"] != true {
		t.Errorf("bandwidth entry %v", c.Plugins[2])
	}
	sys := c.Plugins[3]["sysctl"].(map[string]any)
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6", "net.ipv6.conf.lo.disable_ipv6"} {
		if sys[k] != "1" {
			t.Errorf("tuning %s = %v", k, sys[k])
		}
	}
}

// TestConflistCheckedAsThePluginReadsIt: settings that did not come
// through SettingsFromEnv and that vpc-cni would refuse give no conflist.
func TestConflistCheckedAsThePluginReadsIt(t *testing.T) {
	good, _ := SettingsFromEnv(env())
	for name, mutate := range map[string]func(*Settings){
		"mtu":     func(s *Settings) { s.PodMTU = 100 },
		"mode":    func(s *Settings) { s.SGMode = "loose" },
		"level":   func(s *Settings) { s.PluginLogLevel = "loud" },
		"prefix":  func(s *Settings) { s.VethPrefix = "toolong" },
		"address": func(s *Settings) { s.IpamdAddress = "tcp://10.0.0.1:50051" },
	} {
		s := good
		mutate(&s)
		if b, err := Conflist(s); err == nil || !strings.Contains(err.Error(), "would be refused") {
			t.Errorf("%s: %v\n%s", name, err, b)
		}
	}
}
