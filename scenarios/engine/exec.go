package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/scenarios/policy"
)

// pluginName is the conflist type the runtime resolves to the in-process
// plugin.
const pluginName = "vpc-cni"

// inprocExec is libcni's invoke.Exec that runs the plugin in this process,
// on the node's kernel model, instead of executing a binary: libcni still
// builds the environment, injects the cached result as prevResult and
// caches results exactly as it does for containerd. Only the process
// boundary is skipped, so the kernel model can be shared.
type inprocExec struct {
	plugin *plugin.Plugin
	policy policy.Policy
	// calls counts invocations by verb, for the timeline.
	calls map[string]int
	// stopped are the failpoints at which the plugin process died.
	stopped []*failpoint.Fault
	// tr watches the plugin's calls to ipamd and its driver during a DEL
	// (nil: not traced, as in a quiet run); last is the trace of the
	// latest DEL, nil when the plugin never ran it.
	tr   *tracing
	last *delTrace
}

func (e *inprocExec) ExecPlugin(_ context.Context, _ string, stdin []byte, environ []string) (out []byte, err error) {
	// A crash or hang at a failpoint unwinds here: the process died (or
	// the runtime killed it after its timeout) with nothing run after the
	// point; the runtime sees a plugin that exited without a result.
	defer func() {
		if r := recover(); r != nil {
			st, ok := r.(failpoint.Stopped)
			if !ok {
				panic(r)
			}
			e.stopped = append(e.stopped, st.Fault)
			out, err = nil, fmt.Errorf("netplugin failed: signal: killed (%s)", st.Fault)
			if e.tr != nil && e.tr.cur != nil {
				e.tr.cur.killed = fmt.Sprintf("%s (%s)", st.Fault.Name, st.Fault.Action)
				e.last, e.tr.cur = e.tr.cur, nil
			}
		}
	}()
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	args := &skel.CmdArgs{ContainerID: env["CNI_CONTAINERID"], Netns: env["CNI_NETNS"], IfName: env["CNI_IFNAME"],
		Args: env["CNI_ARGS"], Path: env["CNI_PATH"], StdinData: stdin}
	cmd := env["CNI_COMMAND"]
	e.calls[cmd]++
	switch cmd {
	case "ADD":
		res, err := e.plugin.Add(args)
		if err != nil {
			return nil, asCNIError(err)
		}
		var buf bytes.Buffer
		if err := res.PrintTo(&buf); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case "DEL":
		// Through the binary's entry point: the policy decides the parsed
		// request (deleteFlow).
		e.last = nil
		err := e.plugin.Del(args)
		if e.tr != nil && e.tr.cur != nil {
			e.last, e.tr.cur = e.tr.cur, nil
			e.last.err = err
		}
		return nil, asCNIError(err)
	case "GC":
		return nil, asCNIError(e.plugin.GC(args))
	case "VERSION":
		var buf bytes.Buffer
		err := supported.Encode(&buf)
		return buf.Bytes(), err
	}
	return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "unsupported CNI_COMMAND "+cmd, "")
}

var supported = version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0")

func (e *inprocExec) FindInPath(name string, _ []string) (string, error) {
	if name != pluginName {
		return "", errors.New("only vpc-cni is installed on the simulated node, not " + name)
	}
	return name, nil
}

func (e *inprocExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

// asCNIError is plugin.AsCNIError as an error (a nil *types.Error in an
// error would not be nil).
func asCNIError(err error) error {
	if err == nil {
		return nil
	}
	return plugin.AsCNIError(err)
}

// deleteFlow is the plugin's DEL decision in a run: the run's policy, with
// the request's prevResult noted in the trace of the DEL it opens.
func (e *inprocExec) deleteFlow(p *plugin.Plugin, r *plugin.DelRequest) error {
	if e.tr != nil {
		t := &delTrace{}
		if r.State != nil {
			t.prev = &r.State.Pod
		}
		e.tr.cur = t
	}
	return e.policy.Del(p, r)
}
