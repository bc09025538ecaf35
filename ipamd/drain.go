package ipamd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/releasequeue"
)

// The drain's failpoints: a crash at either must leave nothing released
// twice (the records outlive the crash; the checkpoint says what was
// released).
var (
	FailDrainBeforeCheckpoint = failpoint.Register("ipamd/drain/before-checkpoint", "start: queued releases done in memory, not yet on disk")
	FailDrainBeforeRemove     = failpoint.Register("ipamd/drain/before-remove", "start: queued releases on disk, their records not yet removed")
)

// drainReleaseQueue releases, before ipamd serves, the addresses of the
// DELs that tore their pods down while ipamd could not be reached
// (package releasequeue). A record frees an address only for the sandbox
// that still owns it, by the same rule as a DelNetwork (Store.Release): a
// stale record of an old sandbox never frees a same-name pod's address.
// Each record goes once the checkpoint holds what it released; a crash in
// between leaves the record, and the next start finds its sandbox holding
// nothing. A queue that cannot be read is logged and left to the next
// start and the reconciler: it never keeps ipamd from serving.
func (d *Daemon) drainReleaseQueue() error {
	if d.cfg.ReleaseQueue == "" {
		return nil
	}
	q := releasequeue.Queue{Dir: d.cfg.ReleaseQueue}
	log := d.log.With("queue", q.Dir)
	entries, errs := q.List()
	bad := 0
	for _, err := range errs {
		var br *releasequeue.BadRecordError
		if !errors.As(err, &br) {
			log.Error("release queue unreadable; its addresses stay allocated until the next start or the reconciler", "error", err)
			return nil
		}
		bad++
		log.Error("release record set aside (renamed *.bad): not a record ipamd can trust; its address, if any, is left to the reconciler",
			"file", br.Path, "error", br.Err)
		if err := q.SetAside(filepath.Base(br.Path)); err != nil {
			log.Error("cannot set the bad record aside", "file", br.Path, "error", err)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	var released []datastore.Allocation
	stale := 0
	for _, e := range entries {
		if a, ok := d.releaseQueued(e.Record); ok {
			released = append(released, a)
		} else {
			stale++
		}
	}
	if len(released) > 0 {
		if err := d.startupFault(FailDrainBeforeCheckpoint); err != nil {
			return err
		}
		if err := d.commit(context.Background()); err != nil {
			for _, a := range released {
				if rerr := d.store.Reinstate(a); rerr != nil {
					log.Error("queued release not persisted and not undone", "ip", a.IP, "error", rerr)
				}
			}
			log.Error("queued releases not persisted; kept, with their records, for the next start", "error", err)
			return nil
		}
	}
	if err := d.startupFault(FailDrainBeforeRemove); err != nil {
		return err
	}
	for _, e := range entries {
		if err := q.RemoveFile(e.Name); err != nil {
			log.Warn("cannot remove a drained release record; the next start finds its sandbox holding nothing", "file", e.Name, "error", err)
		}
	}
	log.Info("release queue drained", "released", len(released), "stale", stale, "setAside", bad)
	return nil
}

// releaseQueued releases what one record's sandbox still holds, if it is
// what the record says its DEL tore down.
func (d *Daemon) releaseQueued(r releasequeue.Record) (datastore.Allocation, bool) {
	key := datastore.Key{NetworkName: r.NetworkName, ContainerID: r.ContainerID, IfName: r.IfName}
	meta := datastore.Meta{PodNamespace: r.PodNamespace, PodName: r.PodName, HostVethIndex: r.HostVethIndex}
	log := d.log.With("op", "DrainReleaseQueue", "pod", podName(r.PodNamespace, r.PodName), "containerID", r.ContainerID,
		"ifName", r.IfName, "tornDownAt", r.TornDownAt)
	a, err := d.store.Owned(key, meta)
	switch {
	case err != nil:
		// Released since (a retried DEL reached ipamd), forgotten (a
		// checkpoint lost), or another sandbox's now.
		log.Info("queued release: the sandbox holds nothing now; nothing to release", "ips", r.IPs, "why", err)
		return a, false
	case !slices.Contains(r.IPs, a.IP):
		log.Warn("queued release names other addresses than the sandbox holds; keeping it for the reconciler",
			"queued", r.IPs, "held", a.IP)
		return a, false
	}
	a, err = d.store.Release(key, meta)
	if err != nil {
		log.Warn("queued release refused", "ip", a.IP, "error", err)
		return a, false
	}
	log.Info("address released", "outcome", outcomeReleased, "ip", a.IP, "device", a.DeviceNumber, "table", a.RouteTable,
		"reason", "queued by a DEL that could not reach ipamd")
	d.countDel(outcomeReleased, "ReleaseQueue")
	return a, true
}

// startupFault applies an armed failpoint while ipamd starts: whatever
// its action, the process does not come up (a hang is what its liveness
// probe kills), and Start returns the fault.
func (d *Daemon) startupFault(name failpoint.Name) error {
	f := d.opt.failpoints.Hit(name)
	if f == nil {
		return nil
	}
	d.log.Warn("failpoint", "point", f.Name, "action", f.Action)
	return fmt.Errorf("ipamd: %w", f)
}
