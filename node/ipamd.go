package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/vpccni/vpccni/internal/unarygrpc"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// Daemon is ipamd run as the entrypoint's child, its output the
// container's.
type Daemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// StartIpamd starts path with args, in the entrypoint's environment (ipamd
// reads the same variables).
func StartIpamd(path string, args []string) (*Daemon, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ipamd: %w", err)
	}
	d := &Daemon{cmd: cmd, exited: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// Pid is ipamd's process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Exited is closed when ipamd has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// ExitCode is ipamd's exit status once it has exited: its code, or 128
// plus the signal that killed it, as a shell reports it.
func (d *Daemon) ExitCode() int {
	var ee *exec.ExitError
	if !errors.As(d.err, &ee) {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// Signal passes a signal on to ipamd.
func (d *Daemon) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// ErrIpamdExited: ipamd exited before it answered its health check.
var ErrIpamdExited = errors.New("ipamd exited before it was healthy")

// WaitHealthy polls ipamd's standard gRPC health service on its socket
// (what the DaemonSet's probes ask) every interval until it answers
// SERVING, ipamd exits, or ctx ends. Each miss after the first few is
// logged, so a start that hangs says what it waits on.
func (d *Daemon) WaitHealthy(ctx context.Context, log *slog.Logger, socket string, interval time.Duration) error {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		why := checkHealth(ctx, socket, interval)
		if why == nil {
			log.Info("ipamd is healthy", "socket", socket, "after", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if attempt%10 == 0 {
			log.Info("waiting for ipamd", "socket", socket, "for", time.Since(start).Round(time.Second), "last", why)
		}
		select {
		case <-d.exited:
			return fmt.Errorf("%w (exit status %d)", ErrIpamdExited, d.ExitCode())
		case <-ctx.Done():
			return fmt.Errorf("ipamd not healthy on %s after %s: %v", socket, time.Since(start).Round(time.Second), why)
		case <-time.After(interval):
		}
	}
}

// checkHealth is one health check, nil when SERVING.
func checkHealth(ctx context.Context, socket string, timeout time.Duration) error {
	conn := unarygrpc.New("unix", socket)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second))
	defer cancel()
	r, err := rpc.NewHealthClient(conn).Check(ctx, &rpc.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if r.Status != rpc.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %s", r.Status)
	}
	return nil
}
