package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/node"
)

// stopGrace is how long ipamd is given to stop after SIGTERM when the
// entrypoint gives up on it, before SIGKILL (the reference's pod has 10 s
// of termination grace).
const stopGrace = 8 * time.Second

type runFlags struct {
	cniDir, ipamdPath, socket string
	iptablesMode              string
	healthy, interval         time.Duration
}

func newRun(log *slog.Logger, getenv func(string) string) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] [-- IPAMD-ARGS...]",
		Short: "Install vpc-cni, run ipamd, write the conflist once ipamd answers (the aws-node container)",
		Long: `run checks the settings the conflist is made of (the reference's checks,
and the conflist is read back as vpc-cni will read it), installs vpc-cni
into HOST_CNI_BIN_PATH (it must match this ipamd), and starts ipamd with
--socket and IPAMD-ARGS, in this environment. Once ipamd answers its gRPC
health check on the socket, it writes HOST_CNI_CONFDIR_PATH/10-aws.conflist
(default /host/etc/cni/net.d): the runtime uses vpc-cni from then on. It
passes SIGTERM and SIGINT on to ipamd and exits with ipamd's status.

The conflist: vpc-cni with vethPrefix (AWS_VPC_K8S_CNI_VETHPREFIX), mtu
(POD_MTU, else AWS_VPC_ENI_MTU; 576 to 9001, 1280 to 9001 with
ENABLE_IPv6), podSGEnforcingMode (POD_SECURITY_GROUP_ENFORCING_MODE,
strict or standard), pluginLogFile (AWS_VPC_K8S_PLUGIN_LOG_FILE, an
absolute path or stderr) and pluginLogLevel (AWS_VPC_K8S_PLUGIN_LOG_LEVEL);
then portmap; then bandwidth with ENABLE_BANDWIDTH_PLUGIN=true, and tuning
turning IPv6 off in the pods with DISABLE_POD_V6=true. vpccni's own
VPCCNI_PLUGIN_JOURNAL_FILE (a clean absolute node path) adds journalFile:
vpc-cni then journals every invocation there, for "replay journal FILE".

ipamd writes the node's SNAT and connmark rules with iptables, in the
node's mode: --iptables-mode auto (the default) picks legacy or nft as
the Kubernetes iptables wrappers do (the mode holding kubelet's
KUBE-IPTABLES-HINT chain, else the one with more rules, nft on a tie)
and passes ipamd --iptables iptables-<mode>; legacy or nft force one;
path leaves ipamd with the iptables on its PATH.

Exit status: 1 when a setting is refused or a step fails (each problem on
a line of its own, naming the variable), 2 on a wrong command line, else
ipamd's (128+N when a signal N killed it).`,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() > 0 || (c.ArgsLenAtDash() < 0 && len(args) > 0) {
				return &exitError{exitUsage, fmt.Errorf("run: %q: ipamd's arguments go after --", args[0])}
			}
			return runNode(c.Context(), log, getenv, f, args)
		},
	}
	c.Flags().StringVar(&f.cniDir, "cni-dir", besideMe("cni"), "the image's directory of CNI plugins, where vpc-cni is")
	c.Flags().StringVar(&f.ipamdPath, "ipamd", besideMe("ipamd"), "the ipamd binary")
	c.Flags().StringVar(&f.socket, "socket", ipamd.DefaultSocket, "ipamd's socket: passed to ipamd, probed, and written in the conflist when not the default")
	c.Flags().StringVar(&f.iptablesMode, "iptables-mode", node.ModeAuto, "auto, legacy, nft or path: the iptables mode ipamd writes the node's rules in")
	c.Flags().DurationVar(&f.healthy, "healthy-timeout", 5*time.Minute, "how long ipamd may take to answer its health check before the container fails")
	c.Flags().DurationVar(&f.interval, "health-interval", time.Second, "time between health checks while ipamd starts")
	return c
}

func runNode(ctx context.Context, log *slog.Logger, getenv func(string) string, f runFlags, ipamdArgs []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	for _, a := range ipamdArgs {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
		case name == "socket":
			return &exitError{exitUsage, fmt.Errorf("run: give ipamd's socket as run's --socket, not after --: run probes it")}
		case name == "iptables":
			return &exitError{exitUsage, fmt.Errorf("run: choose ipamd's iptables with run's --iptables-mode, not after --")}
		}
	}
	switch f.iptablesMode {
	case node.ModeAuto, node.ModeLegacy, node.ModeNFT, node.ModePath:
	default:
		return &exitError{exitUsage, fmt.Errorf("run: --iptables-mode %q: want auto, legacy, nft or path", f.iptablesMode)}
	}
	if f.healthy <= 0 || f.interval <= 0 {
		return &exitError{exitUsage, fmt.Errorf("run: --healthy-timeout and --health-interval must be positive")}
	}
	s, err := node.SettingsFromEnv(getenv)
	if err != nil {
		return failed(err)
	}
	if f.socket != ipamd.DefaultSocket {
		s.IpamdAddress = "unix://" + f.socket
	}
	conflist, err := node.Conflist(s)
	if err != nil {
		return failed(err)
	}
	iptablesArgs, err := iptablesFor(ctx, log, f.iptablesMode)
	if err != nil {
		return failed(err)
	}
	dst := filepath.Join(s.HostBinDir, "vpc-cni")
	if err := node.InstallFile(filepath.Join(f.cniDir, "vpc-cni"), dst, 0o755); err != nil {
		return failed(fmt.Errorf("install vpc-cni: %w", err))
	}
	log.Info("vpc-cni installed", "path", dst)

	// Signals are passed on from before ipamd starts: a pod deleted
	// while ipamd starts still stops it cleanly.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	d, err := node.StartIpamd(f.ipamdPath, slices.Concat([]string{"--socket", f.socket}, iptablesArgs, ipamdArgs))
	if err != nil {
		return failed(err)
	}
	log.Info("ipamd started", "pid", d.Pid(), "path", f.ipamdPath, "args", ipamdArgs)
	waitCtx, cancel := context.WithTimeout(ctx, f.healthy)
	defer cancel()
	var signalled atomic.Bool
	go forward(log, sigs, d, func() { signalled.Store(true); cancel() })

	if err := d.WaitHealthy(waitCtx, log, f.socket, f.interval); err != nil {
		if signalled.Load() {
			// Told to stop while ipamd started: its status is ours.
			<-d.Exited()
			return exitWith(d.ExitCode())
		}
		select {
		case <-d.Exited():
		default:
			stop(log, d)
		}
		if code := d.ExitCode(); code != 0 {
			return &exitError{code, err}
		}
		return failed(err)
	}
	confPath := filepath.Join(s.HostConfDir, node.ConflistName)
	if err := node.WriteFile(confPath, conflist, 0o644); err != nil {
		stop(log, d)
		return failed(fmt.Errorf("write the conflist: %w", err))
	}
	log.Info("conflist written: the node's pods network through vpc-cni", "path", confPath, "mtu", s.PodMTU, "vethPrefix", s.VethPrefix)
	<-d.Exited()
	log.Info("ipamd exited", "status", d.ExitCode())
	return exitWith(d.ExitCode())
}

// exitWith is ipamd's status as run's (nil for 0).
func exitWith(code int) error {
	if code != 0 {
		return &exitError{code, nil}
	}
	return nil
}

// forward passes signals on to ipamd until it exits; the first one also
// ends the wait for its health.
func forward(log *slog.Logger, sigs <-chan os.Signal, d *node.Daemon, cancelWait func()) {
	for {
		select {
		case sig := <-sigs:
			log.Info("passing the signal on to ipamd", "signal", sig)
			cancelWait()
			if err := d.Signal(sig); err != nil {
				log.Warn("signal ipamd", "error", err)
			}
		case <-d.Exited():
			return
		}
	}
}

// stop ends ipamd: SIGTERM, then SIGKILL after stopGrace.
func stop(log *slog.Logger, d *node.Daemon) {
	d.Signal(syscall.SIGTERM)
	select {
	case <-d.Exited():
	case <-time.After(stopGrace):
		log.Warn("ipamd did not stop on SIGTERM; killing it", "grace", stopGrace)
		d.Signal(syscall.SIGKILL)
		<-d.Exited()
	}
}

// iptablesFor is ipamd's --iptables for a mode (none for path).
func iptablesFor(ctx context.Context, log *slog.Logger, mode string) ([]string, error) {
	switch mode {
	case node.ModePath:
		return nil, nil
	case node.ModeAuto:
		c, err := node.PickIptablesMode(ctx, node.ExecSaver)
		if err != nil {
			return nil, fmt.Errorf("pick the iptables mode (--iptables-mode legacy, nft or path chooses it): %w", err)
		}
		log.Info("iptables mode picked", "mode", c.Mode, "why", c.Why, "legacyRules", c.Legacy, "nftRules", c.NF)
		mode = c.Mode
	}
	cmd, err := node.IptablesCommand(mode)
	if err != nil {
		return nil, fmt.Errorf("iptables in %s mode: %w", mode, err)
	}
	return []string{"--iptables=" + cmd}, nil
}
