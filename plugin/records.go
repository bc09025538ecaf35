package plugin

import "github.com/vpccni/vpccni/plugin/attachrec"

// records is the store of the netconf's stateDir.
func (p *Plugin) records(inv *invocation) attachrec.Store {
	return attachrec.Store{Dir: attachrec.DirFor(inv.conf.StateDir)}
}

// forgetRecord removes the attachment's record once nothing of it is
// left to tear down: a record outliving its attachment would name, to a
// later DEL of the same sandbox, addresses that are someone else's by
// then (the node would still decide, but it costs a code 7).
func (p *Plugin) forgetRecord(inv *invocation) {
	if err := p.records(inv).Remove(inv.conf.Name, inv.args.ContainerID, inv.args.IfName); err != nil {
		inv.log.Warn("cannot remove the attachment's record", "error", err)
	}
}
