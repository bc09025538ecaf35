package ipamd

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// ipamd's failpoints: around the checkpoint write of each call, in the
// reconciler between removing an allocation's rules and releasing it, and
// in the reaper around a handed-over veth's deletion.
var (
	FailAddBeforeCheckpoint = failpoint.Register("ipamd/add/before-checkpoint", "AddNetwork: assigned in memory, not yet on disk")
	FailAddBeforeReply      = failpoint.Register("ipamd/add/before-reply", "AddNetwork: on disk, the plugin not yet answered")
	FailDelBeforeCheckpoint = failpoint.Register("ipamd/del/before-checkpoint", "DelNetwork: released in memory, not yet on disk")
	FailDelBeforeReply      = failpoint.Register("ipamd/del/before-reply", "DelNetwork: released on disk, the plugin not yet answered")
	FailReconcileRelease    = failpoint.Register("ipamd/reconcile/before-release", "reconciler: a gone pod's rules removed, its address not yet released")
	FailReapBeforeDelete    = failpoint.Register("ipamd/reap/before-delete", "reaper: a handed-over pod veth not yet deleted, its address held")
	FailReapBeforeRelease   = failpoint.Register("ipamd/reap/before-release", "reaper: a handed-over pod veth gone, its address not yet released")
)

// fault applies an armed failpoint inside a call: an error fails the
// call; a crash kills the daemon (what was not written is lost, the caller
// sees the connection drop); a hang answers nothing until the caller's
// deadline.
func (d *Daemon) fault(ctx context.Context, name failpoint.Name) error {
	f := d.opt.failpoints.Hit(name)
	if f == nil {
		return nil
	}
	d.log.Warn("failpoint", "point", f.Name, "action", f.Action)
	switch f.Action {
	case failpoint.Crash:
		// Kill cancels every call in flight, this one too, and does not
		// wait for handlers: wait for it, so whoever watches the daemon
		// sees it dead once the caller has its error.
		killed := make(chan struct{})
		go func() { d.Kill(); close(killed) }()
		<-killed
		return status.Error(codes.Unavailable, f.Error())
	case failpoint.Hang:
		// What the caller sees of a hang is its own deadline expiring;
		// in-process that is answered at once rather than waited out, so a
		// harness can run thousands of them. A real ipamd that never
		// answers is the real-kernel suite's.
		return status.Error(codes.DeadlineExceeded, f.Error())
	}
	return status.Error(codes.Internal, f.Error())
}

// Serving reports whether the daemon is up (false after Stop, Kill or a
// crash at a failpoint).
func (d *Daemon) Serving() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.listener != nil
}
