package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/audit/ipamdview"
	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/scenarios/invariant"
)

// The node audit (package audit) runs at the end of every cell as an
// independent validator: it reads only what vpccni-audit reads on a real
// node (the node's kernel, ipamd's checkpoint file, the runtime's
// sandboxes, ipamd's introspection), never the harness's knowledge of
// which pod had which address. Its findings and the invariants' must
// agree (auditcheck.go); a disagreement is a violation of its own,
// invariant.AuditDisagrees, and Run never lets a cell with one match.

// auditCheck runs the audit on the settled node and compares it with the
// cell's violations vs, found on world w.
func (r *run) auditCheck(w invariant.World, vs []invariant.Violation) ([]audit.Finding, []invariant.Violation, error) {
	in, notes, err := r.auditInput()
	if err != nil {
		return nil, nil, fmt.Errorf("the audit's input: %w", err)
	}
	if r.opt.auditInput != nil {
		r.opt.auditInput(&in)
	}
	fs, err := audit.Run(in)
	if err != nil {
		return nil, nil, fmt.Errorf("the audit: %w", err)
	}
	for _, n := range notes {
		r.note("audit: %s", n)
	}
	if len(fs) > 0 {
		r.note("audit: %d findings", len(fs))
		for _, f := range fs {
			r.note("audit: %s", f)
		}
	}
	return fs, agree(fs, judged{vs: vs, w: w, checkpointCut: r.checkpointCut()}), nil
}

// checkpointCut: the timeline armed an ipamd failpoint between a call's
// change in memory and its checkpoint write, to fail or hang there (a
// crash restarts ipamd from the file, which then does not lag), and it
// was reached.
func (r *run) checkpointCut() bool {
	hits := r.fp.Hits()
	for _, ev := range r.s.Timeline {
		if f := ev.Failpoint; f != nil && strings.HasPrefix(f.Name, "ipamd/") && strings.HasSuffix(f.Name, "/before-checkpoint") &&
			f.Action != string(failpoint.Crash) && hits[failpoint.Name(f.Name)] > 0 {
			return true
		}
	}
	return false
}

// auditInput is what an operator's audit would read on this node now.
// notes say what it could not read (a corrupt checkpoint).
func (r *run) auditInput() (audit.Input, []string, error) {
	in := audit.Input{Node: r.node, VethPrefixes: []string{ownership.DefaultVethPrefix}, Sandboxes: r.sandboxes()}
	var notes []string
	f, err := checkpoint.ReadUnvalidated(r.ckpt)
	switch {
	case errors.Is(err, checkpoint.ErrNotExist):
		// No file: ipamd never wrote one, or it was lost; no allocations.
		in.Allocations = []checkpoint.Allocation{}
	case err != nil:
		// A corrupt file cannot be read: the audit judges without it,
		// as vpccni-audit does with --checkpoint "".
		notes = append(notes, fmt.Sprintf("checkpoint not read: %v", err))
	default:
		in.Allocations = append([]checkpoint.Allocation{}, f.Allocations...)
	}
	if r.ipamd != nil {
		// ipamd's memory as /v1/enis serves it, parsed by the command's
		// own reader.
		body, err := json.Marshal(r.ipamd.Introspection().ENIs())
		if err != nil {
			return in, nil, fmt.Errorf("ipamd's /v1/enis: %w", err)
		}
		v, err := ipamdview.Parse(body)
		if err != nil {
			return in, nil, err
		}
		in.Ipamd = v.Audit()
	}
	return in, notes, nil
}

// sandboxes are what the runtime's ListPodSandbox shows: a running pod's
// sandbox ready, a sandbox whose DEL kubelet still retries (stopping, or
// one a failed ADD left) not ready. A pod never started, a failed ADD's
// sandbox already removed, a deleted one, and one the runtime lost
// (runtime-forgets) are not listed: the runtime does not know them.
func (r *run) sandboxes() []audit.Sandbox {
	out := []audit.Sandbox{} // asked, even when it lists none
	for _, n := range sortedPodNames(r.pods) {
		p := r.pods[n]
		if p.phase != running && p.phase != terminating {
			continue
		}
		out = append(out, audit.Sandbox{ID: p.containerID, Namespace: p.ns, Name: p.name, Ready: p.phase == running})
	}
	return out
}

func sortedPodNames(m map[string]*pod) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
