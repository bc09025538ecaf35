package ipamd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vpccni/vpccni/internal/failpoint"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/metrics"
	"github.com/vpccni/vpccni/ipamd/reconcile"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// restore loads the checkpoint into the datastore
// (docs/reference-facts.md#restart-and-recovery), or rebuilds the allocations from the kernel
// when the policy says so.
func (d *Daemon) restore() (err error) {
	path := d.cfg.Checkpoint
	if path == "" {
		return nil
	}
	d.cfg.Metrics.ActionStarted(metrics.FnCheckpointRestore)
	defer func() { d.cfg.Metrics.ActionDone(metrics.FnCheckpointRestore, err) }()
	f, err := checkpoint.Read(path)
	switch {
	case errors.Is(err, checkpoint.ErrNotExist):
		if d.cfg.Restore.AdoptOnMissing && d.cfg.Kernel != nil {
			return d.adopt("no checkpoint file at " + path)
		}
		d.log.Info("no checkpoint: a fresh node", "checkpoint", path)
		return nil
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrVersion):
		if !d.cfg.Restore.RecoverCorrupt || d.cfg.Kernel == nil {
			return fmt.Errorf("ipamd: %w; the file is left as it is: to start anyway, rebuilding the allocations "+
				"from the pods' veths and routes, run with --recover-from-kernel (VPCCNI_RECOVER_FROM_KERNEL=true)", err)
		}
		aside := fmt.Sprintf("%s.unreadable-%d", path, d.cfg.Now().Unix())
		if rerr := os.Rename(path, aside); rerr != nil {
			return fmt.Errorf("ipamd: %w; moving it aside failed: %v", err, rerr)
		}
		d.log.Warn("checkpoint unreadable; moved aside, rebuilding from the kernel", "error", err, "movedTo", aside)
		return d.adopt("unreadable checkpoint")
	case err != nil:
		return fmt.Errorf("ipamd: read the checkpoint: %w", err)
	}
	allocs := make([]datastore.Allocation, 0, len(f.Allocations))
	for _, a := range f.Allocations {
		ip, _ := a.Addr() // Read validated every address
		allocs = append(allocs, datastore.Allocation{
			Key: datastore.Key{NetworkName: a.NetworkName, ContainerID: a.ContainerID, IfName: a.IfName},
			Meta: datastore.Meta{PodNamespace: a.Metadata.K8SPodNamespace, PodName: a.Metadata.K8SPodName,
				Netns: a.Netns, HostVethIndex: a.HostVethIndex},
			IP:        ip,
			Since:     a.Time(),
			Releasing: a.Releasing,
		})
	}
	kept, dropped := d.store.Restore(allocs)
	for _, x := range dropped {
		d.log.Warn("checkpointed allocation not restored", "ip", x.Allocation.IP, "containerID", x.Allocation.Key.ContainerID,
			"pod", podName(x.Allocation.Meta.PodNamespace, x.Allocation.Meta.PodName), "reason", x.Reason)
	}
	pruned := 0
	if d.cfg.Restore.PruneStale && d.cfg.Kernel != nil {
		pruned = d.pruneStale(kept)
	}
	d.log.Info("checkpoint restored", "checkpoint", path, "allocations", len(kept), "dropped", len(dropped), "pruned", pruned)
	return nil
}

// adopt takes back, as recovered allocations, the addresses the kernel
// shows pods still use.
func (d *Daemon) adopt(why string) error {
	found, err := reconcile.Rebuild(d.cfg.Kernel, d.store.IsPodAddress, d.vethPrefixes())
	if err != nil {
		return fmt.Errorf("ipamd: rebuild allocations from the kernel (%s): %w", why, err)
	}
	var allocs []datastore.Allocation
	for _, r := range found {
		allocs = append(allocs, datastore.Allocation{Key: datastore.RecoveredKey(r.HostVeth), IP: r.IP, Since: d.cfg.Now(),
			Meta: datastore.Meta{HostVethIndex: r.HostVethIndex}})
	}
	kept, dropped := d.store.Restore(allocs)
	for _, x := range dropped {
		d.log.Warn("address found in the kernel not adopted", "ip", x.Allocation.IP, "hostVeth", x.Allocation.Key.ContainerID, "reason", x.Reason)
	}
	if len(kept) == 0 && len(dropped) == 0 {
		d.log.Info("no pod found in the kernel: a fresh node", "why", why)
		return nil
	}
	d.log.Warn("allocations rebuilt from the kernel", "why", why, "adopted", len(kept), "notAdopted", len(dropped))
	return nil
}

func (d *Daemon) vethPrefixes() []string {
	if len(d.cfg.VethPrefixes) > 0 {
		return d.cfg.VethPrefixes
	}
	return []string{ownership.DefaultVethPrefix, ownership.StrictVethPrefix}
}

// pruneStale is the reference's PruneStaleAllocations (v1.13+): a restored
// pod with no host veth is dropped at once and rules 512 `to ip` and 1536
// `from ip` (any table) are deleted. The legacy harness profiles use it.
func (d *Daemon) pruneStale(kept []datastore.Allocation) int {
	links, err := d.cfg.Kernel.LinkList()
	if err != nil {
		d.log.Warn("cannot list links; nothing pruned", "error", err)
		return 0
	}
	n := 0
	for _, a := range kept {
		if a.Meta.PodNamespace == "" || a.Meta.PodName == "" || hasLinkWithSuffix(links, ownership.PodSuffix(a.Meta.PodNamespace, a.Meta.PodName, 0)) {
			continue
		}
		host := &net.IPNet{IP: a.IP.AsSlice(), Mask: net.CIDRMask(a.IP.BitLen(), a.IP.BitLen())}
		for _, r := range []kernel.Rule{{Priority: 512, Dst: host, Table: kernel.TableMain}, {Priority: 1536, Src: host}} {
			if err := d.cfg.Kernel.RuleDel(r); err != nil && !kernel.IsNotFound(err) {
				d.log.Warn("prune stale rule", "ip", a.IP, "priority", r.Priority, "error", err)
			}
		}
		d.store.Undo(a)
		n++
	}
	return n
}

func hasLinkWithSuffix(links []kernel.Link, suffix string) bool {
	for _, l := range links {
		if strings.HasSuffix(l.Name, suffix) {
			return true
		}
	}
	return false
}

// checkpointFile is the datastore in the checkpoint's format.
func (d *Daemon) checkpointFile() checkpoint.File {
	f := checkpoint.File{Version: checkpoint.Version, Allocations: []checkpoint.Allocation{}}
	for _, a := range d.store.Allocations() {
		c := checkpoint.Allocation{NetworkName: a.Key.NetworkName, ContainerID: a.Key.ContainerID, IfName: a.Key.IfName,
			AllocationTimestamp: a.Since.UnixNano(),
			Metadata:            checkpoint.Metadata{K8SPodNamespace: a.Meta.PodNamespace, K8SPodName: a.Meta.PodName, InterfacesCount: 1},
			Netns:               a.Meta.Netns, HostVethIndex: a.Meta.HostVethIndex, Releasing: a.Releasing}
		if a.IP.Is4() {
			c.IPv4 = a.IP.String()
		} else {
			c.IPv6 = a.IP.String()
		}
		f.Allocations = append(f.Allocations, c)
	}
	return f
}

// commit makes the datastore's latest change durable before the caller
// answers: a pod is never told of an address a crash would forget.
func (d *Daemon) commit(ctx context.Context) error {
	w := d.ckpt.Load()
	if w == nil {
		return nil
	}
	d.cfg.Metrics.ActionStarted(metrics.FnCheckpointCommit)
	err := w.Commit(ctx)
	d.cfg.Metrics.ActionDone(metrics.FnCheckpointCommit, err)
	return err
}

// poolView is the datastore as the reconciler sees it.
type poolView struct{ d *Daemon }

func (p poolView) Holders() []reconcile.Holder {
	var out []reconcile.Holder
	for _, a := range p.d.store.Allocations() {
		h := reconcile.Holder{ID: keyID(a.Key), IP: a.IP, PodNamespace: a.Meta.PodNamespace, PodName: a.Meta.PodName, Since: a.Since}
		if a.Key.Recovered() {
			h.HostVeth, h.HostVethIndex = a.Key.ContainerID, a.Meta.HostVethIndex
		}
		out = append(out, h)
	}
	return out
}

func (p poolView) Release(id string) (err error) {
	p.d.cfg.Metrics.ActionStarted(metrics.FnReconcileRelease)
	defer func() { p.d.cfg.Metrics.ActionDone(metrics.FnReconcileRelease, err) }()
	k, ok := parseKeyID(id)
	if !ok {
		return fmt.Errorf("ipamd: malformed holder id %q", id)
	}
	if f := p.d.opt.failpoints.Hit(FailReconcileRelease); f != nil {
		// In a pass there is no caller to answer: a crash kills the daemon
		// (the harness restarts it), an error or a hang skips the release.
		if f.Action == failpoint.Crash {
			go p.d.Kill()
		}
		return f
	}
	a, err := p.d.store.ReleaseKey(k)
	if err != nil {
		return err
	}
	if err := p.d.commit(context.Background()); err != nil {
		if rerr := p.d.store.Reinstate(a); rerr != nil {
			p.d.log.Error("release not persisted and not undone", "ip", a.IP, "error", rerr)
		}
		return err
	}
	return nil
}

func (p poolView) IsPodAddress(ip netip.Addr) bool { return p.d.store.IsPodAddress(ip) }
func (p poolView) IsCooling(ip netip.Addr) bool    { return p.d.store.IsCooling(ip) }

func keyID(k datastore.Key) string { return k.NetworkName + "\x00" + k.ContainerID + "\x00" + k.IfName }

func parseKeyID(id string) (datastore.Key, bool) {
	parts := strings.Split(id, "\x00")
	if len(parts) != 3 {
		return datastore.Key{}, false
	}
	return datastore.Key{NetworkName: parts[0], ContainerID: parts[1], IfName: parts[2]}, true
}

func (d *Daemon) observePool(action string, err error) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.PoolAction(action, err)
	}
	if err != nil {
		d.cfg.Metrics.ActionFailed(metrics.FnWarmPoolAction)
	}
}

func (d *Daemon) observeCheckpoint(took time.Duration, err error) {
	if d.onCheckpointWrite != nil {
		d.onCheckpointWrite()
	}
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.CheckpointWrite(took, err)
	}
	if err != nil {
		d.log.Error("checkpoint write failed", "checkpoint", d.cfg.Checkpoint, "error", err)
	}
}
