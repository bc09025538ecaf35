package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/awsenv"
)

func env(kv ...string) awsenv.Getenv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestSettingsDefaults: an empty environment gives the reference's
// conflist values and host paths.
func TestSettingsDefaults(t *testing.T) {
	s, err := SettingsFromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{HostConfDir: "/host/etc/cni/net.d", HostBinDir: "/host/opt/cni/bin", VethPrefix: "eni", PodMTU: 9001,
		SGMode: "strict", PluginLogFile: "/var/log/aws-routed-eni/plugin.log", PluginLogLevel: "Debug"}
	if s != want {
		t.Errorf("defaults\n got %+v\nwant %+v", s, want)
	}
}

// TestSettingsRead: each variable lands where it should; the pods' MTU
// is the ENIs' unless POD_MTU says otherwise.
func TestSettingsRead(t *testing.T) {
	s, err := SettingsFromEnv(env(EnvENIMTU, "1500", EnvVethPrefix, "pod", EnvSGMode, "standard", EnvPluginLogFile, "stderr",
		EnvPluginLogLevel, "info", EnvBandwidth, "1", EnvNoPodV6, "True", EnvIPv6, "true", EnvHostConfDir, "/n", EnvHostBinDir, "/b"))
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{HostConfDir: "/n", HostBinDir: "/b", VethPrefix: "pod", PodMTU: 1500, IPv6: true, SGMode: "standard",
		PluginLogLevel: "info", Bandwidth: true, NoPodV6: true}
	if s != want {
		t.Errorf("\n got %+v\nwant %+v", s, want)
	}
	if s, err := SettingsFromEnv(env(EnvJournalFile, "/var/log/aws-routed-eni/journal.jsonl")); err != nil ||
		s.JournalFile != "/var/log/aws-routed-eni/journal.jsonl" {
		t.Errorf("VPCCNI_PLUGIN_JOURNAL_FILE: %q, %v", s.JournalFile, err)
	}
	if s, err := SettingsFromEnv(env(EnvENIMTU, "1500", EnvPodMTU, "1400")); err != nil || s.PodMTU != 1400 {
		t.Errorf("POD_MTU=1400 beside AWS_VPC_ENI_MTU=1500: %d, %v; want 1400", s.PodMTU, err)
	}
}

// TestSettingsRefused: every value the reference's entrypoint refuses
// (and those vpc-cni would refuse on every ADD) is an error naming the
// variable and the value; several mistakes are all reported.
func TestSettingsRefused(t *testing.T) {
	cases := []struct {
		env        []string
		name, want string
	}{
		{[]string{EnvPodMTU, "575"}, EnvPodMTU, "576 to 9001"},
		{[]string{EnvPodMTU, "9002"}, EnvPodMTU, "576 to 9001"},
		{[]string{EnvIPv6, "true", EnvPodMTU, "1279"}, EnvPodMTU, "1280 to 9001"},
		{[]string{EnvIPv6, "true", EnvENIMTU, "1000", EnvPodMTU, "1500"}, EnvENIMTU, "1280 to 9001"},
		{[]string{EnvENIMTU, "big"}, EnvENIMTU, "whole number"},
		{[]string{EnvVethPrefix, "eth"}, EnvVethPrefix, "other than eth, lo and vlan"},
		{[]string{EnvVethPrefix, "vlan"}, EnvVethPrefix, "other than"},
		{[]string{EnvVethPrefix, "lo"}, EnvVethPrefix, "other than"},
		{[]string{EnvVethPrefix, "abcde"}, EnvVethPrefix, "longer than 4"},
		{[]string{EnvPodENI, "true", EnvSGMode, "loose"}, EnvSGMode, "strict or standard"},
		{[]string{EnvSGMode, "Strict"}, EnvSGMode, "even with ENABLE_POD_ENI off"},
		{[]string{EnvPluginLogFile, "stdout"}, EnvPluginLogFile, "not stdout"},
		{[]string{EnvPluginLogFile, "plugin.log"}, EnvPluginLogFile, "absolute path"},
		{[]string{EnvPluginLogFile, "/var/log/../plugin.log"}, EnvPluginLogFile, "clean absolute"},
		{[]string{EnvPluginLogLevel, "verbose"}, EnvPluginLogLevel, "debug, info, warn or error"},
		{[]string{EnvBandwidth, "yes"}, EnvBandwidth, "true or false"},
		{[]string{EnvNoPodV6, "on"}, EnvNoPodV6, "true or false"},
		{[]string{EnvHostConfDir, "etc/cni"}, EnvHostConfDir, "absolute"},
		{[]string{EnvHostBinDir, "bin"}, EnvHostBinDir, "absolute"},
		{[]string{EnvJournalFile, "journal.jsonl"}, EnvJournalFile, "clean absolute path"},
		{[]string{EnvJournalFile, "/var/log/./j"}, EnvJournalFile, "clean absolute path"},
	}
	for _, c := range cases {
		_, err := SettingsFromEnv(env(c.env...))
		var e *awsenv.Error
		if !errors.As(err, &e) || e.Name != c.name || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%v: %v; want an error naming %s and %q", c.env, err, c.name, c.want)
		}
	}
	_, err := SettingsFromEnv(env(EnvPodMTU, "1", EnvVethPrefix, "eth", EnvPluginLogFile, "stdout"))
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("three mistakes: %v; want three lines", err)
	}
}
