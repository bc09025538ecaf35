package ipamd

import (
	"context"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// The reaper finishes the DELs that handed ipamd their pod's veth pair
// (DelNetworkRequest.DeleteHostVeth): the plugin has removed the pod's
// rules and host route and returned; the kernel takes 10 to 40 ms to
// unregister a link (an RCU grace period), which the DEL then does not
// wait for. For each allocation handed over (datastore.Releasing), the
// reaper deletes the host veth by its ifindex, if that is still the pod's
// veth, and only then releases the address: no address goes back to the
// pool while its pod's veth exists. A veth already gone (its pod's
// namespace removed by the runtime) is only released.
//
// It runs after every hand-over (wake), at start once the checkpoint is
// restored, and every reapInterval as a safety net; on a harness's
// simulated clock, from Tick.

// reapInterval is the safety net's period.
const reapInterval = 10 * time.Second

// canTakeVeths: only an ipamd that reaches the node's kernel can delete a
// pod's veth.
func (d *Daemon) canTakeVeths() bool { return d.cfg.Kernel != nil }

// wakeReaper asks the background reaper for a pass (never blocks).
func (d *Daemon) wakeReaper() {
	select {
	case d.reapWake <- struct{}{}:
	default:
	}
}

// runReaper is the background reaper (not on a harness's clock).
func (d *Daemon) runReaper(ctx context.Context) {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.reapWake:
		case <-t.C:
		}
		d.reapOnce(ctx, d.callFault(ctx))
	}
}

// callFault is fault inside a running daemon (a crash kills it).
func (d *Daemon) callFault(ctx context.Context) func(failpoint.Name) error {
	return func(name failpoint.Name) error { return d.fault(ctx, name) }
}

// reapOnce finishes every allocation handed over; one whose veth cannot
// be deleted now stays for the next pass. fault applies the reaper's
// failpoints: the daemon's own (callFault) when it serves, startupFault
// in Start (where a crash is Start's error); an error from it ends the
// pass and is returned.
func (d *Daemon) reapOnce(ctx context.Context, fault func(failpoint.Name) error) (err error) {
	if !d.canTakeVeths() {
		return nil
	}
	d.reapMu.Lock()
	defer d.reapMu.Unlock()
	d.cfg.Metrics.ActionStarted(metrics.FnReapHandedOver)
	defer func() { d.cfg.Metrics.ActionDone(metrics.FnReapHandedOver, err) }()
	finished := 0
	for _, a := range d.store.Releasing() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fault(FailReapBeforeDelete); err != nil {
			return err
		}
		gone, err := d.deleteHandedVeth(a)
		if err != nil {
			d.log.Warn("cannot delete a handed-over pod veth; the address stays held, retrying on the next pass",
				"ip", a.IP, "pod", podName(a.Meta.PodNamespace, a.Meta.PodName), "hostVethIndex", a.Meta.HostVethIndex, "error", err)
			continue
		}
		if err := fault(FailReapBeforeRelease); err != nil {
			return err
		}
		if d.store.Finish(a) {
			finished++
			d.log.Info("address released", "outcome", outcomeReleased, "ip", a.IP, "pod", podName(a.Meta.PodNamespace, a.Meta.PodName),
				"hostVeth", gone)
		}
	}
	if finished == 0 {
		return nil
	}
	if err := d.commit(ctx); err != nil {
		// The addresses are free here; the checkpoint still says
		// releasing, so a restart reaps them again (their veths are gone).
		d.log.Error("releases of handed-over pods not persisted", "error", err)
	}
	return nil
}

// deleteHandedVeth deletes the host veth of a handed-over allocation when
// the link at its ifindex is still that pod's veth, and says what became
// of it. A link of another name or kind at the index is not touched: the
// pod's own veth went with its namespace.
func (d *Daemon) deleteHandedVeth(a datastore.Allocation) (string, error) {
	idx := a.Meta.HostVethIndex
	l, err := d.cfg.Kernel.LinkByIndex(idx)
	switch {
	case kernel.IsNotFound(err):
		return "already gone", nil
	case err != nil:
		return "", err
	case l.Kind != kernel.KindVeth || !d.isPodVeth(l.Name, a):
		return "gone (its ifindex is another link's now: " + l.Name + ")", nil
	}
	if err := d.cfg.Kernel.LinkDelIndex(idx); err != nil && !kernel.IsNotFound(err) {
		return "", err
	}
	return "deleted " + l.Name, nil
}

// isPodVeth: name is the host veth vpc-cni names for the allocation's pod
// (or, for one recovered from the kernel, the veth it was recovered from).
func (d *Daemon) isPodVeth(name string, a datastore.Allocation) bool {
	if a.Key.Recovered() {
		return name == a.Key.ContainerID
	}
	if a.Meta.PodNamespace == "" || a.Meta.PodName == "" {
		return false
	}
	for _, p := range d.vethPrefixes() {
		if name == ownership.HostVeth(p, a.Meta.PodNamespace, a.Meta.PodName) {
			return true
		}
	}
	return false
}
