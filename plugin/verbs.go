package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// The CNI verbs, as the binary (and the harness's runtime) calls them.
// Each is journaled when the netconf names a journalFile (journaled.go);
// the flows are add, del, check, gc and status.

// Add is CNI ADD: an address from ipamd and the pod's network; the result
// carries the cleanup state.
func (p *Plugin) Add(args *skel.CmdArgs) (types.Result, error) {
	return p.journaled("ADD", args, func(q *Plugin) (types.Result, error) { return q.add(args) })
}

// Del is CNI DEL: vpccni's delete flow.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	return p.errOnly("DEL", args, (*Plugin).del)
}

// Check is CNI CHECK: the pod's objects as ADD left them.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return p.errOnly("CHECK", args, (*Plugin).check)
}

// GC is CNI GC (1.1): stale attachments torn down and released.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	return p.errOnly("GC", args, (*Plugin).gc)
}

// Status is CNI STATUS (1.1): whether an ADD can succeed now.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	return p.errOnly("STATUS", args, (*Plugin).status)
}

func (p *Plugin) errOnly(verb string, args *skel.CmdArgs, run func(*Plugin, *skel.CmdArgs) error) error {
	_, err := p.journaled(verb, args, func(q *Plugin) (types.Result, error) { return nil, run(q, args) })
	return err
}
