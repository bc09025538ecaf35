package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin"
	"github.com/vpccni/vpccni/plugin/driver"
)

// delTrace is what one DEL invocation did, in order, as the engine sees it
// through the plugin's two seams: the calls to ipamd (with ipamd's answer,
// classified as the plugin classifies it) and the driver's teardowns and
// read-backs. It is the same for every delete policy, vpccni's included:
// it watches what a flow does rather than asking the flow what it meant
// to do.
type delTrace struct {
	// prev is the pod as the prevResult describes it (nil: no prevResult).
	prev *driver.Pod
	// inspected is what the pod namespace showed, when it was read back.
	inspected *driver.Pod
	acts      []string
	asked     bool // ipamd was called
	released  bool // ipamd answered with the pod's allocation
	tornDown  bool // a teardown was attempted
	err       error
	killed    string // the failpoint the plugin died at
	// answer is ipamd's last answer in a word or two ("released
	// 10.0.1.5", "unknown pod", "unreachable"; "" when not asked).
	answer string
}

// ipamdAnswer records a DelNetwork call and ipamd's answer.
func (t *delTrace) ipamdAnswer(reply *rpc.DelNetworkReply, err error) {
	t.asked = true
	var what string
	switch out := plugin.Classify(err); {
	case err == nil && !reply.GetSuccess():
		what = "refused (Success=false)"
	case out == plugin.OutcomeOK:
		t.released = true
		what = "released"
		for _, md := range reply.GetIPAllocationMetadata() {
			for _, a := range []string{md.GetIPv4Addr(), md.GetIPv6Addr()} {
				if a != "" {
					what += " " + a
				}
			}
		}
	case out == plugin.OutcomeUnknownPod:
		what = "unknown pod"
	case out == plugin.OutcomeUnreachable:
		what = "unreachable"
	case out == plugin.OutcomeTimeout:
		what = "no answer (timeout)"
	default:
		what = "error (" + status.Convert(err).Message() + ")"
	}
	t.answer = what
	t.acts = append(t.acts, "ipamd: "+what)
}

// teardown records a driver teardown and where its pod came from.
func (t *delTrace) teardown(p driver.Pod, rep driver.Report, err error) {
	t.tornDown = true
	// Every flow tears down from one of three sources; once ipamd has
	// answered with the allocation, a teardown is from that answer (which
	// names the same addresses as the prevResult when both are right).
	source := " from "
	switch {
	case t.inspected != nil && p.SamePod(*t.inspected):
		source += "the pod namespace"
	case t.released:
		source += "ipamd's reply"
	case t.prev != nil && p.SamePod(*t.prev):
		source += "prevResult"
	default:
		source = ""
	}
	if err != nil {
		t.acts = append(t.acts, fmt.Sprintf("teardown%s failed (%v)", source, err))
		return
	}
	what := "torn down" + source
	switch {
	case len(rep.Removed) == 0:
		what += " (nothing left)"
	default:
		what += fmt.Sprintf(" (removed %d)", len(rep.Removed))
	}
	if len(rep.Skipped) > 0 {
		what += fmt.Sprintf(" (%d left to a new holder)", len(rep.Skipped))
	}
	t.acts = append(t.acts, what)
}

// inspect records a read-back of the pod namespace.
func (t *delTrace) inspect(p *driver.Pod, err error) {
	switch {
	case err != nil:
		t.acts = append(t.acts, fmt.Sprintf("reading the pod namespace back failed (%v)", err))
	case p == nil:
		t.acts = append(t.acts, "nothing of the pod in its namespace")
	default:
		t.inspected = p
	}
}

// String says what the DEL did and what it returned, e.g. "ipamd: unknown
// pod → success, no teardown" or "torn down from prevResult (removed 4),
// then ipamd: unreachable → success".
func (t *delTrace) String() string {
	var b strings.Builder
	b.WriteString(strings.Join(t.acts, ", then "))
	if !t.asked && t.killed == "" {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("ipamd not asked")
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	switch {
	case t.killed != "":
		b.WriteString("→ plugin killed at " + t.killed)
		return b.String()
	case t.err == nil:
		b.WriteString("→ success")
	default:
		b.WriteString("→ error " + errText(t.err))
	}
	if !t.tornDown {
		b.WriteString(", no teardown")
	}
	return b.String()
}

// errText is a CNI error's message (its details are what the trace
// already says: ipamd's answer, the failed teardown), quoted.
func errText(err error) string {
	var ce *types.Error
	if errors.As(err, &ce) {
		return fmt.Sprintf("%q", ce.Msg)
	}
	return fmt.Sprintf("%q", err.Error())
}

// tracing is the seam the engine puts between the plugin and ipamd, and
// between the plugin and its driver: while a DEL runs (cur is set), each
// call is recorded in its trace.
type tracing struct {
	cur *delTrace
}

func (tr *tracing) dialer(inner plugin.Dialer) plugin.Dialer {
	return func(target string) (rpc.CNIBackendClient, io.Closer, error) {
		c, closer, err := inner(target)
		if err != nil {
			if tr.cur != nil {
				tr.cur.asked, tr.cur.answer = true, "unreachable"
				tr.cur.acts = append(tr.cur.acts, fmt.Sprintf("ipamd: unreachable (%v)", err))
			}
			return nil, nil, err
		}
		return tracedBackend{c, tr}, closer, nil
	}
}

type tracedBackend struct {
	rpc.CNIBackendClient
	tr *tracing
}

func (b tracedBackend) DelNetwork(ctx context.Context, in *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	reply, err := b.CNIBackendClient.DelNetwork(ctx, in)
	if b.tr.cur != nil {
		b.tr.cur.ipamdAnswer(reply, err)
	}
	return reply, err
}

type tracedDriver struct {
	driver.Networker
	tr *tracing
}

func (d tracedDriver) Teardown(host, pod kernel.API, p driver.Pod) (driver.Report, error) {
	rep, err := d.Networker.Teardown(host, pod, p)
	if d.tr.cur != nil {
		d.tr.cur.teardown(p, rep, err)
	}
	return rep, err
}

func (d tracedDriver) Inspect(host, pod kernel.API, containerIf string) (*driver.Pod, error) {
	p, err := d.Networker.Inspect(host, pod, containerIf)
	if d.tr.cur != nil {
		d.tr.cur.inspect(p, err)
	}
	return p, err
}
