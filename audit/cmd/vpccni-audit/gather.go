package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/vpccni/vpccni/audit"
	"github.com/vpccni/vpccni/audit/cri"
	"github.com/vpccni/vpccni/audit/ipamdview"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
)

// sourceNote says what one source of evidence gave, for the report's head:
// an audit without the runtime or ipamd judges less, and says so.
type sourceNote struct {
	Source string `json:"source"`
	Where  string `json:"where"`
	Read   bool   `json:"read"`
	Note   string `json:"note"`
}

// gather reads every source into the audit's input. Only the node and a
// named checkpoint must be readable (an error here is exit 2); the runtime
// and ipamd are asked when named, and an answer that does not come is
// noted, not fatal: the audit is most needed when ipamd is down.
func gather(o *options, k kernel.API) (audit.Input, []sourceNote, error) {
	in := audit.Input{Node: k, VethPrefixes: o.vethPrefixes}
	notes := []sourceNote{{Source: "node", Where: nsName(o.netns), Read: true, Note: "links, routes of every table, rules"}}

	ck := sourceNote{Source: "checkpoint", Where: o.checkpoint}
	if o.checkpoint == "" {
		ck.Note = "not read (--checkpoint \"\"): allocations are not judged"
	} else {
		f, err := checkpoint.Read(o.checkpoint)
		if errors.Is(err, checkpoint.ErrCorrupt) {
			// An address given twice makes the file unusable for ipamd's
			// restore, but it is exactly what the audit reports as DOUBLE.
			if loose, lerr := checkpoint.ReadUnvalidated(o.checkpoint); lerr == nil {
				f, ck.Note = loose, fmt.Sprintf("read, though ipamd would refuse it (%v)", err)
				err = nil
			}
		}
		switch {
		case errors.Is(err, checkpoint.ErrNotExist):
			return in, nil, fmt.Errorf("no checkpoint at %s: ipamd has not run on this node, or keeps it elsewhere (--checkpoint, %s); --checkpoint \"\" audits without one", o.checkpoint, checkpoint.EnvPath)
		case err != nil:
			return in, nil, err
		}
		in.Allocations = f.Allocations
		if in.Allocations == nil {
			in.Allocations = []checkpoint.Allocation{}
		}
		ck.Read = true
		if ck.Note == "" {
			ck.Note = fmt.Sprintf("%d allocations", len(f.Allocations))
		}
	}
	notes = append(notes, ck)

	rt := sourceNote{Source: "runtime", Where: o.criEndpoint}
	if o.criEndpoint == "" {
		rt.Note = "not asked (--cri-endpoint \"\"): a pod with a veth is taken for live, and --fix leaves veths alone"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		sbs, err := cri.List(ctx, o.criEndpoint)
		cancel()
		if err != nil {
			rt.Note = fmt.Sprintf("no answer (%v): a pod with a veth is taken for live, and --fix leaves veths alone", err)
		} else {
			in.Sandboxes = []audit.Sandbox{}
			ready := 0
			for _, s := range sbs {
				in.Sandboxes = append(in.Sandboxes, audit.Sandbox{ID: s.ID, Namespace: s.Namespace, Name: s.Name, Ready: s.Ready})
				if s.Ready {
					ready++
				}
			}
			rt.Read, rt.Note = true, fmt.Sprintf("%d sandboxes, %d ready", len(sbs), ready)
		}
	}
	notes = append(notes, rt)

	ip := sourceNote{Source: "ipamd", Where: o.introspect}
	if o.introspect == "" {
		ip.Note = "not asked (--introspection \"\")"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		v, err := ipamdview.Fetch(ctx, o.introspect)
		cancel()
		if err != nil {
			ip.Note = fmt.Sprintf("no answer (%v): judged from the checkpoint alone", err)
		} else {
			in.Ipamd = v.Audit()
			ip.Read, ip.Note = true, fmt.Sprintf("%d ENIs, %d addresses held", len(v.ENIs), len(v.Held))
		}
	}
	notes = append(notes, ip)
	return in, notes, nil
}

func nsName(path string) string {
	if path == "" {
		return "this process's network namespace"
	}
	return path
}
