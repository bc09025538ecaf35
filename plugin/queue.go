package plugin

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/releasequeue"
)

// QueueBesideSocket is the release queue of the ipamd at address: the
// directory beside its Unix socket, where that ipamd drains it when it
// starts. A TCP address has none.
func QueueBesideSocket(address string) (releasequeue.Queue, bool) {
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok {
		return releasequeue.Queue{}, false
	}
	return releasequeue.Queue{Dir: releasequeue.DirFor(path)}, true
}

func (p *Plugin) queue(r *DelRequest) (releasequeue.Queue, bool) {
	if p.env.ReleaseQueue == nil {
		return releasequeue.Queue{}, false
	}
	return p.env.ReleaseQueue(r.inv.conf.IpamdAddress)
}

// queueRelease records, for ipamd's next start, the addresses of a pod
// this DEL tore down but could not have released: those ipamd's record
// names, or, when ipamd could not be asked, those the teardown covered.
// queued is false when there is no queue or nothing to queue.
func (p *Plugin) queueRelease(r *DelRequest, pod, known *driver.Pod) (queued bool, err error) {
	q, ok := p.queue(r)
	if !ok {
		return false, nil
	}
	src := pod
	if known != nil {
		src = known
	}
	if src == nil {
		return false, nil
	}
	var ips []netip.Addr
	for _, ip := range src.IPs {
		if !slices.Contains(ips, ip.Addr) {
			ips = append(ips, ip.Addr)
		}
	}
	rec := releasequeue.Record{Version: releasequeue.Version, NetworkName: r.inv.conf.Name, ContainerID: r.inv.args.ContainerID,
		IfName: r.inv.args.IfName, PodNamespace: r.inv.podNS, PodName: r.inv.podName, HostVethIndex: r.HostVethIndex,
		IPs: ips, TornDownAt: time.Now().UTC()}
	if err := p.env.Failpoints.Trigger(FailDelQueue); err != nil {
		return false, err
	}
	if err := q.Append(rec); err != nil {
		return false, err
	}
	r.inv.log.Info("release queued for ipamd's next start", "queue", q.Dir, "file", rec.Name(), "ips", ips)
	return true, nil
}

// forgetQueued removes the attachment's record once ipamd has answered
// its release: a record of a retried DEL that finally reached ipamd would
// only be found stale at the next start.
func (p *Plugin) forgetQueued(r *DelRequest) {
	q, ok := p.queue(r)
	if !ok {
		return
	}
	if err := q.Remove(r.inv.conf.Name, r.inv.args.ContainerID, r.inv.args.IfName); err != nil {
		r.inv.log.Warn("cannot remove the attachment's queued release; ipamd finds it stale at its next start", "error", err)
	}
}
