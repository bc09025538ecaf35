package plugin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/plugin/driver"
)

// TestDelUnknownPodLogsNoWarning: after a teardown from the prevResult,
// ipamd answering "unknown pod" holds nothing for the pod, so the log says
// so at INFO, not the warning that an address stays allocated; ipamd
// unreachable still gets that warning.
func TestDelUnknownPodLogsNoWarning(t *testing.T) {
	for _, c := range []struct {
		name      string
		ipamd     delFn
		level     string
		msg, lack string
	}{
		{"unknown pod", ipamdUnknownPod, "INFO", "ipamd holds no address for the pod (unknown pod)", "stays allocated"},
		{"unknown pod (reference text)", ipamdUnknownRef, "INFO", "ipamd holds no address for the pod (unknown pod)", "stays allocated"},
		{"unreachable", ipamdUnreachable, "WARN", "stays allocated in ipamd", "unknown pod"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			var buf bytes.Buffer
			r.p.env.Log = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r.expectHandles(true)
			gomock.InOrder(
				r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
				r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(c.ipamd),
				r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
			)
			if err := r.p.Del(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")}))); err != nil {
				t.Fatalf("DEL = %v, want success", err)
			}
			found := false
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				rec := map[string]any{}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				msg, _ := rec["msg"].(string)
				if strings.Contains(msg, c.lack) {
					t.Errorf("logged %q", line)
				}
				if strings.Contains(msg, c.msg) {
					found = true
					if rec["level"] != c.level {
						t.Errorf("%q at %v, want %s", msg, rec["level"], c.level)
					}
				}
			}
			if !found {
				t.Errorf("no line with %q in:\n%s", c.msg, buf.String())
			}
		})
	}
}
