package journal

import (
	"errors"
	"strings"
	"testing"
)

const good = `{"format":"vpccni-journal/1","time":"2026-12-02T10:00:00Z","plugin":"v1","env":{"CNI_COMMAND":"DEL","CNI_CONTAINERID":"c1","CNI_NETNS":"/var/run/netns/p","CNI_IFNAME":"eth0"},"stdin":{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni"},"netns":{"path":"/var/run/netns/p","exists":false},"ipamd":[{"method":"DelNetwork","outcome":"unreachable","code":"Unavailable","error":"connection refused","durationMs":0.5}],"durationMs":3}`

func TestReadGood(t *testing.T) {
	es, err := Read(strings.NewReader(good + "\n\n" + good))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Env.Command != "DEL" || es[0].Netns.Exists || es[0].Ipamd[0].Code != "Unavailable" {
		t.Fatalf("%+v", es)
	}
	// A complete last line without its newline is fine.
	if es, err := Read(strings.NewReader(good)); err != nil || len(es) != 1 {
		t.Fatalf("%v %d", err, len(es))
	}
}

// TestReadRejects: each malformed line is refused, naming its line and
// what is wrong, and nothing of the journal is returned.
func TestReadRejects(t *testing.T) {
	cases := []struct{ name, line, want string }{
		{"truncated", good[:len(good)/2], "not a journal entry"},
		{"not JSON", "hello", "not a journal entry"},
		{"other format", strings.Replace(good, "vpccni-journal/1", "vpccni-journal/9", 1), `format "vpccni-journal/9"`},
		{"unknown field", strings.Replace(good, `"plugin":"v1"`, `"plugin":"v1","extra":1`, 1), `unknown field "extra"`},
		{"unknown verb", strings.Replace(good, `"CNI_COMMAND":"DEL"`, `"CNI_COMMAND":"VERSION"`, 1), `CNI_COMMAND "VERSION"`},
		{"stdin not an object", strings.Replace(good, `"stdin":{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni"}`, `"stdin":"x"`, 1), "stdin is not a JSON object"},
		{"no stdin", strings.Replace(good, `"stdin":{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni"},`, ``, 1), "stdin is not a JSON object"},
		{"result and error", strings.Replace(good, `"durationMs":3}`, `"result":{},"error":{"code":11,"msg":"x"},"durationMs":3}`, 1), "both a result and an error"},
		{"result of a DEL", strings.Replace(good, `"durationMs":3}`, `"result":{},"durationMs":3}`, 1), "a result for DEL"},
		{"netns path differs", strings.Replace(good, `"path":"/var/run/netns/p"`, `"path":"/var/run/netns/q"`, 1), "is not CNI_NETNS"},
		{"unknown method", strings.Replace(good, `"method":"DelNetwork"`, `"method":"Steal"`, 1), `unknown method "Steal"`},
		{"error without code", strings.Replace(good, `"code":"Unavailable",`, ``, 1), "without its gRPC code"},
		{"reply and error", strings.Replace(good, `"outcome":"unreachable"`, `"outcome":"unreachable","reply":{}`, 1), "both a reply and an error"},
		{"two values", good + " {}", "more than one JSON value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es, err := Read(strings.NewReader(good + "\n" + c.line + "\n" + good + "\n"))
			var le *LineError
			if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), c.want) || es != nil {
				t.Fatalf("Read: %v (%d entries), want line 2: %q", err, len(es), c.want)
			}
		})
	}
}

func TestReadLongLine(t *testing.T) {
	long := strings.Replace(good, `"plugin":"v1"`, `"plugin":"`+strings.Repeat("x", MaxLine)+`"`, 1)
	_, err := Read(strings.NewReader(good + "\n" + long + "\n"))
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("%v", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	es, err := Read(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	b, err := es[0].Marshal()
	if err != nil || b[len(b)-1] != '\n' || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("%q %v", b, err)
	}
	again, err := Read(strings.NewReader(string(b)))
	if err != nil || again[0].Env != es[0].Env || string(again[0].Stdin) != string(es[0].Stdin) {
		t.Fatalf("round trip: %+v %v", again, err)
	}
}

// FuzzRead: any input is read or refused with a line number; never a
// panic, and what is read validates.
func FuzzRead(f *testing.F) {
	f.Add(good)
	f.Add(good + "\n" + good[:40])
	f.Add("\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		es, err := Read(strings.NewReader(s))
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for i := range es {
			if err := es[i].validate(); err != nil {
				t.Fatalf("entry %d read but invalid: %v", i, err)
			}
		}
	})
}
