package plugin

import (
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/attachrec"
	"github.com/vpccni/vpccni/plugin/driver"
)

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

// readRecord is the attachment's record as a DEL source (r.Record), or
// nil. A file that is not a valid record is set aside (*.bad) for an
// operator and never trusted; a valid one of another pod is ignored.
// Neither stops the DEL: the other sources remain.
func (p *Plugin) readRecord(r *DelRequest) {
	log := r.inv.log
	st := p.records(r.inv)
	rec, err := st.Load(r.inv.conf.Name, r.inv.args.ContainerID, r.inv.args.IfName)
	var bad *attachrec.BadRecordError
	switch {
	case errors.Is(err, attachrec.ErrNotFound):
		return
	case errors.As(err, &bad):
		log.Error("the attachment's record is not valid: set aside, not a source of what to tear down", "error", err)
		if serr := st.SetAside(filepath.Base(bad.Path)); serr != nil {
			log.Error("cannot set the bad record aside", "error", serr)
		}
		return
	case err != nil:
		log.Error("cannot read the attachment's record; tearing down from the other sources", "error", err)
		return
	}
	if rec.PodNamespace != r.inv.podNS || rec.PodName != r.inv.podName {
		log.Warn("ignoring the attachment's record: it names another pod than the request",
			"recordPod", rec.PodNamespace+"/"+rec.PodName, "file", rec.Name())
		return
	}
	hv := rec.HostVeth
	if !ownership.HasPodSuffix(hv, r.inv.podNS, r.inv.podName) || len(hv) <= ownership.SuffixLen ||
		ownership.ValidatePrefix(hv[:len(hv)-ownership.SuffixLen]) != nil {
		log.Warn("ignoring the attachment's record: its host veth is not this pod's", "hostVeth", hv, "file", rec.Name())
		return
	}
	pod := &driver.Pod{HostVeth: hv, ContainerIf: r.inv.args.IfName}
	for _, ip := range rec.IPs {
		pod.IPs = append(pod.IPs, driver.PodIP{Addr: ip.Addr, Table: ip.Table})
	}
	if rec.VlanID != 0 {
		pod.Branch = &driver.Branch{VlanID: rec.VlanID, Strict: rec.Strict}
	}
	r.Record = pod
	if r.HostVethIndex == 0 && rec.HostVethIndex > 0 {
		r.HostVethIndex = recordedVethIndex(r, rec)
	}
}

// recordedVethIndex is the host veth's ifindex the record keeps, as the
// sandbox's proof to ipamd when its namespace cannot give one: 0 when the
// node has a link of that index that is not the record's veth (the index
// was handed on, and the proof would be another pod's).
func recordedVethIndex(r *DelRequest, rec attachrec.Record) int {
	l, err := r.Host.LinkByIndex(rec.HostVethIndex)
	switch {
	case kernel.IsNotFound(err):
		return rec.HostVethIndex
	case err != nil:
		r.inv.log.Warn("cannot check the recorded host veth's ifindex; ipamd gets no proof of ownership", "error", err)
		return 0
	case l.Name != rec.HostVeth:
		r.inv.log.Warn("the recorded host veth's ifindex is another link's now; ipamd gets no proof of ownership",
			"ifindex", rec.HostVethIndex, "link", l.Name, "hostVeth", rec.HostVeth)
		return 0
	}
	return rec.HostVethIndex
}

// badRecord is a DEL's code-7 error for a record the node contradicts.
func badRecord(err error) error {
	return types.NewError(types.ErrInvalidNetworkConfig, "the attachment's record in stateDir names an address this node does not show to be a pod's; "+
		"set aside, the pod torn down from the other sources", err.Error())
}
