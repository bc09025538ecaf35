// Package journal is the record of the plugin's invocations: with
// `journalFile` in its network configuration, vpc-cni appends one JSON
// line per invocation (verb, CNI environment, stdin, result or error,
// duration, every call to ipamd with its answer, and whether the pod
// namespace was there). `replay journal` replays such a file on the kernel
// model (scenarios/journal), so what a real node or the real-kernel suite
// did can be re-run, inspected and checked without that node.
//
// The format is versioned (Format, "vpccni-journal/1"); a reader refuses a
// line of another format, or with a field it does not know, naming the
// line, rather than replaying half of it.
package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Format is the format tag every line carries.
const Format = "vpccni-journal/1"

// MaxLine bounds one line when reading: a stdin with a prevResult is a few
// KiB, a GC with thousands of valid attachments some hundreds.
const MaxLine = 4 << 20

// Entry is one invocation of the plugin.
type Entry struct {
	Format string    `json:"format"`
	Time   time.Time `json:"time"`
	// Plugin is the binary's version.
	Plugin string `json:"plugin"`
	Env    Env    `json:"env"`
	// Stdin is the network configuration exactly as the runtime wrote it
	// (with prevResult and, for GC, the valid attachments).
	Stdin json.RawMessage `json:"stdin"`
	// Netns says whether CNI_NETNS named a namespace when the plugin
	// opened it (absent when CNI_NETNS was empty or never opened).
	Netns *Netns `json:"netns,omitempty"`
	// Ipamd is every call made to ipamd, in order, with its answer.
	Ipamd []Call `json:"ipamd,omitempty"`
	// Result is ADD's result as written to stdout; Error the CNI error
	// of a failed verb. Both absent: the verb succeeded with no output.
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *types.Error    `json:"error,omitempty"`
	DurationMs float64         `json:"durationMs"`
}

// Env is the CNI environment of the invocation.
type Env struct {
	Command     string `json:"CNI_COMMAND"`
	ContainerID string `json:"CNI_CONTAINERID,omitempty"`
	Netns       string `json:"CNI_NETNS,omitempty"`
	IfName      string `json:"CNI_IFNAME,omitempty"`
	Args        string `json:"CNI_ARGS,omitempty"`
	Path        string `json:"CNI_PATH,omitempty"`
}

// Netns is what the plugin found at CNI_NETNS.
type Netns struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
}

// Call is one call to ipamd: the request and reply as protobuf JSON
// (protojson, field names as in rpc.proto), or the gRPC status of a
// failed call.
type Call struct {
	// Method is the RPC's name: AddNetwork, DelNetwork (CNIBackend),
	// ListAllocations, PoolStatus (Inventory), Check (health).
	Method  string          `json:"method"`
	Request json.RawMessage `json:"request,omitempty"`
	Reply   json.RawMessage `json:"reply,omitempty"`
	// Outcome is the plugin's classification (ok, unreachable, timeout,
	// unknown-pod, refused, error).
	Outcome string `json:"outcome"`
	// Code and Error are the gRPC status of a failed call.
	Code       string  `json:"code,omitempty"`
	Error      string  `json:"error,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// Methods a Call may name.
var Methods = map[string]bool{"AddNetwork": true, "DelNetwork": true, "ListAllocations": true, "PoolStatus": true, "Check": true}

// Verbs the plugin journals (VERSION is answered by skel and not).
var Verbs = map[string]bool{"ADD": true, "DEL": true, "CHECK": true, "GC": true, "STATUS": true}

// Marshal is the entry as one line, newline included.
func (e *Entry) Marshal() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// LineError names the line of a journal that could not be read.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("journal line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Read decodes a whole journal. Blank lines are skipped; any other line
// must be a complete entry of this format, or Read fails naming it: a
// replay of part of a journal would report a node state that never was.
// A last line without its newline is accepted only if it is complete (a
// plugin killed in mid-write leaves a truncated one, which is an error).
func Read(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var out []Entry
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		e, err := decode(b)
		if err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes", MaxLine)
		}
		return nil, &LineError{Line: line + 1, Err: err}
	}
	return out, nil
}

func decode(b []byte) (Entry, error) {
	var e Entry
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&e); err != nil {
		return e, fmt.Errorf("not a journal entry: %v", err)
	}
	if d.More() {
		return e, errors.New("more than one JSON value on the line")
	}
	return e, e.validate()
}

func (e *Entry) validate() error {
	switch {
	case e.Format != Format:
		return fmt.Errorf("format %q, want %q (written by another version of vpc-cni?)", e.Format, Format)
	case !Verbs[e.Env.Command]:
		return fmt.Errorf("CNI_COMMAND %q is not one of ADD, DEL, CHECK, GC, STATUS", e.Env.Command)
	case len(e.Stdin) == 0 || !json.Valid(e.Stdin) || e.Stdin[0] != '{':
		return errors.New("stdin is not a JSON object")
	case e.Result != nil && e.Error != nil:
		return errors.New("both a result and an error")
	case e.Result != nil && e.Env.Command != "ADD":
		return fmt.Errorf("a result for %s (only ADD has one)", e.Env.Command)
	case e.Netns != nil && e.Netns.Path != e.Env.Netns:
		return fmt.Errorf("netns %q is not CNI_NETNS %q", e.Netns.Path, e.Env.Netns)
	}
	for i, c := range e.Ipamd {
		if !Methods[c.Method] {
			return fmt.Errorf("ipamd[%d]: unknown method %q", i, c.Method)
		}
		if c.Error != "" && c.Code == "" {
			return fmt.Errorf("ipamd[%d]: an error without its gRPC code", i)
		}
		if c.Reply != nil && c.Code != "" {
			return fmt.Errorf("ipamd[%d]: both a reply and an error", i)
		}
	}
	return nil
}
