package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// TestDriverLogsToPluginLog: with pluginLogFile and pluginLogLevel
// "Debug" (the level names are case-insensitive, as the reference spells
// them capitalised), the driver's DEBUG lines of a DEL and an ADD are in
// the plugin's log file, with the verb's attributes, and none go to the
// fallback log.
func TestDriverLogsToPluginLog(t *testing.T) {
	for _, level := range []string{"Debug", "DEBUG", "debug"} {
		t.Run(level, func(t *testing.T) {
			w := newHostileWorld(t, nil, 1) // nil: the plugin makes its own driver
			path := filepath.Join(t.TempDir(), "plugin.log")
			conf := func(prev any) []byte {
				c := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni",
					"pluginLogFile": path, "pluginLogLevel": level}
				if prev != nil {
					c["prevResult"] = prev
				}
				b, err := json.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			if err := w.p.Del(w.victim.cmdArgs(conf(w.genuine()))); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			w.ipamd.alloc[victimName] = &rpc.IPAllocationMetadata{IPv4Addr: "10.0.2.11", DeviceNumber: 1, RouteTableId: 2}
			if _, err := w.p.Add(w.victim.cmdArgs(conf(nil))); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"pod network torn down": "DEL", "pod network set up": "ADD"}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				rec := map[string]any{}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				msg, _ := rec["msg"].(string)
				if verb, ok := want[msg]; ok && rec["level"] == "DEBUG" && rec["verb"] == verb && rec["pod"] == "default/"+victimName {
					delete(want, msg)
				}
			}
			if len(want) > 0 {
				t.Errorf("the plugin log lacks the driver's DEBUG lines %v:\n%s", want, b)
			}
		})
	}
}

// TestLogLevelNames: every spelling of a level name is accepted, in any
// case; anything else is an error that names the field.
func TestLogLevelNames(t *testing.T) {
	for in, want := range map[string]string{"": "INFO", "Debug": "DEBUG", "TRACE": "DEBUG", "Info": "INFO",
		"Warn": "WARN", "WARNING": "WARN", "Error": "ERROR"} {
		if l, err := parseLevel(in); err != nil || l.String() != want {
			t.Errorf("parseLevel(%q) = %v, %v; want %s", in, l, err, want)
		}
	}
	if _, err := parseLevel("verbose"); err == nil || !strings.Contains(err.Error(), "pluginLogLevel") {
		t.Errorf("parseLevel(verbose): %v", err)
	}
}
