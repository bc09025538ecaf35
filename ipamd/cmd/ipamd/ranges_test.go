package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFlagRanges: every duration and count flag is checked against its
// documented range at start. Out of range, ipamd exits 2 with a message
// naming the flag, the value and the range, and leaves no socket behind;
// at the bounds it is accepted.
func TestFlagRanges(t *testing.T) {
	refused := []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{args: []string{"--reconcile-interval", "-1s"}, want: []string{"--reconcile-interval", "-1s", "between 1s and 24h0m0s"}},
		{args: []string{"--reconcile-interval", "0s"}, want: []string{"--reconcile-interval", "0s", "between 1s"}},
		{args: []string{"--reconcile-interval", "25h"}, want: []string{"--reconcile-interval", "25h0m0s"}},
		{args: []string{"--reconcile-grace", "1ns"}, want: []string{"--reconcile-grace", "1ns", "between 30s and 24h0m0s"}},
		{args: []string{"--reconcile-grace", "0s"}, want: []string{"--reconcile-grace", "0s", "between 30s"}},
		{args: []string{"--reconcile-grace", "29s"}, want: []string{"--reconcile-grace", "29s"}},
		{args: []string{"--leaked-eni-sweep-interval", "30s"}, want: []string{"--leaked-eni-sweep-interval", "30s", "between 1m0s and 24h0m0s"}},
		{args: []string{"--leaked-eni-min-age", "0s"}, want: []string{"--leaked-eni-min-age", "0s", "between 1m0s and 24h0m0s"}},
		{args: []string{"--ip-cooldown", "-1s"}, want: []string{"--ip-cooldown", "-1s", "between 0s and 1h0m0s"}},
		{env: map[string]string{"IP_COOLDOWN_PERIOD": "7200"}, want: []string{"IP_COOLDOWN_PERIOD", "2h0m0s", "between 0s and 1h0m0s"}},
		{args: []string{"--warm-ip-target", "-1"}, want: []string{"--warm-ip-target", "-1", "between 0 and 10000"}},
		{env: map[string]string{"WARM_ENI_TARGET": "-1"}, want: []string{"WARM_ENI_TARGET", "-1", "between 0 and 100"}},
		{args: []string{"--minimum-ip-target", "10001"}, want: []string{"--minimum-ip-target", "10001"}},
		{args: []string{"--warm-prefix-target", "1001"}, want: []string{"--warm-prefix-target", "1001"}},
		{args: []string{"--max-eni", "-5"}, want: []string{"--max-eni", "-5", "between -1 and 100"}},
		{args: []string{"--eni-mtu", "575"}, want: []string{"--eni-mtu", "575", "576 to 9001 on an IPv4"}},
		{args: []string{"--eni-mtu", "9002"}, want: []string{"--eni-mtu", "9002"}},
		{args: []string{"--ipv6", "--eni-mtu", "1279"}, want: []string{"--eni-mtu", "1279", "1280 to 9001 on an IPv6"}},
		{env: map[string]string{"AWS_VPC_ENI_MTU": "100"}, want: []string{"AWS_VPC_ENI_MTU", "100", "576 to 9001"}},
		{env: map[string]string{"AWS_VPC_ENI_MTU": "jumbo"}, want: []string{"AWS_VPC_ENI_MTU", "jumbo", "whole number"}},
		{args: []string{"--connmark", "0"}, want: []string{"--connmark", "AWS_VPC_K8S_CNI_CONNMARK", "1 to 0xffffffff"}},
		{env: map[string]string{"AWS_VPC_K8S_CNI_CONNMARK": "0x100000000"}, want: []string{"AWS_VPC_K8S_CNI_CONNMARK", "0x100000000"}},
		{env: map[string]string{"AWS_VPC_K8S_CNI_CONNMARK": "mark"}, want: []string{"AWS_VPC_K8S_CNI_CONNMARK", "mark"}},
		{env: map[string]string{"AWS_VPC_K8S_CNI_RANDOMIZESNAT": "fully"}, want: []string{"AWS_VPC_K8S_CNI_RANDOMIZESNAT", "fully", "prng"}},
		{env: map[string]string{"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": "10.1.0.0/16,fd00::/8"}, want: []string{"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "fd00::/8", "not an IPv4 CIDR"}},
		{args: []string{"--exclude-snat-cidrs", "10.1.0.0"}, want: []string{"--exclude-snat-cidrs", "10.1.0.0"}},
		{env: map[string]string{"AWS_VPC_K8S_CNI_EXTERNALSNAT": "yes"}, want: []string{"AWS_VPC_K8S_CNI_EXTERNALSNAT", "yes", "true or false"}},
		{env: map[string]string{"AWS_VPC_CNI_NODE_PORT_SUPPORT": "on"}, want: []string{"AWS_VPC_CNI_NODE_PORT_SUPPORT", "on"}},
	}
	for _, c := range refused {
		t.Run(strings.Join(c.args, " ")+mapString(c.env), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			sock := filepath.Join(t.TempDir(), "ipamd.sock")
			var out, errb bytes.Buffer
			code := run(isolated(t, append(c.args, "--socket", sock)...), &out, &errb, stopped())
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr %q does not name %q", errb.String(), w)
				}
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Errorf("a socket was left behind (%v)", err)
			}
		})
	}
	accepted := [][]string{
		{"--reconcile-interval", "1s"}, {"--reconcile-interval", "24h"}, {"--reconcile-grace", "30s"},
		{"--reconcile-grace", "24h"}, {"--ip-cooldown", "0s"}, {"--ip-cooldown", "1h"}, {"--max-eni", "-1"},
		{"--warm-eni-target", "0"}, {"--warm-ip-target", "10000"},
		{"--eni-mtu", "576"}, {"--eni-mtu", "9001"}, {"--eni-mtu", "0"}, {"--ipv6", "--eni-mtu", "1280"},
		{"--connmark", "0xffffffff"}, {"--connmark", "128"}, {"--randomize-snat", "none"}, {"--randomize-snat", "hashrandom"},
		{"--exclude-snat-cidrs", "0.0.0.0/0, 172.16.0.0/12"}, {"--external-snat", "--node-port-support=false"},
		{"--leaked-eni-sweep-interval", "0"}, {"--leaked-eni-sweep-interval", "0", "--leaked-eni-min-age", "0"},
		{"--leaked-eni-sweep-interval", "1m", "--leaked-eni-min-age", "24h"},
	}
	for _, args := range accepted {
		if _, err := parseFlags(args, func(string) string { return "" }); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}

func mapString(m map[string]string) string {
	s := ""
	for k, v := range m {
		s += " " + k + "=" + v
	}
	return s
}

// DISABLE_LEAKED_ENI_CLEANUP=true, the reference's switch, turns the
// sweep off; a flag on the command line still wins.
func TestLeakedENICleanupSwitch(t *testing.T) {
	env := func(k string) string {
		if k == "DISABLE_LEAKED_ENI_CLEANUP" {
			return "true"
		}
		return ""
	}
	f, err := parseFlags(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if f.leakSweepInterval != 0 {
		t.Errorf("DISABLE_LEAKED_ENI_CLEANUP=true: sweep every %s, want none", f.leakSweepInterval)
	}
	if f, err = parseFlags([]string{"--leaked-eni-sweep-interval", "10m"}, env); err != nil || f.leakSweepInterval != 10*time.Minute {
		t.Errorf("the flag did not win over the variable: %v, %v", f, err)
	}
	if f, err = parseFlags(nil, func(string) string { return "" }); err != nil || f.leakSweepInterval != 5*time.Minute {
		t.Errorf("default sweep interval: %v, %v; want 5m", f, err)
	}
}
