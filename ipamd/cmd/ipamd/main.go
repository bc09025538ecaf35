// Command ipamd is vpccni's IP address management daemon.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd"
)

var buildVersion = "dev"

const about = `ipamd — vpccni's IP address management daemon (the aws-node pod's job)

ipamd holds the node's pool of pod addresses — the secondary IPv4
addresses of the instance's ENIs — and hands them to the vpc-cni plugin
over gRPC (service rpc.CNIBackend, wire-compatible with the reference AWS
VPC CNI) on a Unix socket restricted to root (mode 0660). The standard gRPC
health service answers for "" and "grpc.health.v1.aws-node".

This version keeps its allocations in memory: a restarted ipamd has
forgotten every pod (the vpc-cni plugin tears pods down without it).
SIGTERM or SIGINT finishes the calls in flight, removes the socket and
exits 0.

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipamd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", ipamd.DefaultSocket, "path of the gRPC Unix socket")
	cloudKind := fs.String("cloud", "memory", `where ENIs and addresses come from: "memory" (an in-memory instance, no AWS)`)
	instanceType := fs.String("instance-type", "m5.large", "instance type of the in-memory cloud ("+strings.Join(memory.Known(), ", ")+")")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	strict := fs.Bool("reject-version-mismatch", false, "refuse calls whose ClientVersion differs from this build (FailedPrecondition), as the reference does")
	version := fs.Bool("version", false, "print the build version and exit")
	fs.Usage = func() {
		fmt.Fprint(stderr, about)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(os.Stdout, "ipamd", buildVersion)
		return 0
	}
	log, err := logger(stderr, *level, *format)
	if err != nil {
		fmt.Fprintln(stderr, "ipamd:", err)
		return 2
	}
	if *cloudKind != "memory" {
		fmt.Fprintf(stderr, "ipamd: --cloud %q is not supported by this build (only \"memory\")\n", *cloudKind)
		return 2
	}
	inv, err := memory.New(*instanceType)
	if err != nil {
		fmt.Fprintln(stderr, "ipamd:", err)
		return 2
	}
	d, err := ipamd.New(ipamd.Config{SocketPath: *socket, Inventory: inv, Logger: log, Version: buildVersion, RejectVersionMismatch: *strict})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := d.Start(); err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	log.Info("ipamd started", "version", buildVersion, "socket", *socket, "cloud", *cloudKind, "instanceType", *instanceType,
		"addresses", d.Datastore().Stats().Total)
	s := <-sig
	log.Info("stopping", "signal", s.String())
	d.Stop()
	return 0
}

func logger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q is not text or json", format)
}
