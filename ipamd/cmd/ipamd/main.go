// Command ipamd is vpccni's IP address management daemon. Run it with
// --help for what it does and its flags.
package main

import (
	"context"
	"errors"
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

// buildVersion is set by the Makefile (-ldflags -X main.buildVersion=…).
var buildVersion = "dev"

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // the daemon could not start
	exitUsage  = 2 // bad flags
)

const usage = `Usage: ipamd [flags]

ipamd is vpccni's IP address management daemon, the job the aws-node pod
does in the reference AWS VPC CNI. It holds the node's pool of pod
addresses (the secondary IPv4 addresses of the instance's ENIs) and hands
them to the vpc-cni plugin over gRPC: service rpc.CNIBackend, wire-
compatible with the reference, on a Unix socket only root and its group
may use (mode 0660), beside the standard gRPC health service, SERVING for
"" and "grpc.health.v1.aws-node". This version keeps its allocations in
memory only: a restarted ipamd has forgotten every pod (the plugin tears
pods down without it). It runs until SIGTERM or SIGINT, then finishes the
calls in flight, removes its socket and exits 0.

Flags:
  --socket PATH
        Unix socket to serve on (default %s). Its directory is created
        (mode 0755) if missing; a socket file left by a killed ipamd is
        replaced.
  --cloud memory
        Where the instance and its addresses come from (default memory).
        "memory", the only value for now, is an in-memory instance with
        every ENI attached and every address assigned; it calls no AWS API.
  --instance-type TYPE
        Instance type of the memory cloud, which sets the number of ENIs
        and of addresses per ENI (default m5.large). Known: %s.
  --log-level LEVEL
        debug, info, warn or error (default info). Logs go to stderr.
  --log-format FORMAT
        text or json (default text).
  --ipv6
        IPv6 mode: hand pods /128 addresses from the primary ENI's
        delegated IPv6 prefix instead of IPv4 addresses (the reference's
        ENABLE_IPv6 with prefix delegation). The environment variable
        ENABLE_IPv6=true sets it too.
  --enable-pod-eni
        Security groups for pods (the reference's ENABLE_POD_ENI; the
        environment variable ENABLE_POD_ENI=true sets it too). Before
        giving a pod an address, ipamd asks the pod-ENI source whether the
        pod has a branch ENI: a pod whose first container has a
        vpc.amazonaws.com/pod-eni* limit, described by its
        vpc.amazonaws.com/pod-eni annotation. Such a pod gets its branch
        ENI's address, VLAN id, MAC and gateway and the trunk ENI's link
        index, for the plugin to build a VLAN link on the trunk; it takes
        no address from the pool. The trunk ENI is found in ipamd's own
        network namespace by its MAC; a branch pod whose trunk link cannot
        be found is refused (Success=false), and the log says why. With
        --cloud memory the instance gets a trunk ENI in its last ENI slot
        (device 2 of an m5.large), which carries no pod addresses; outside
        a harness that created a link with the trunk's MAC, branch pods are
        then refused. On DEL of a pod ipamd holds no address for, ipamd
        asks the source again: a branch pod's VLAN and address come back,
        a pod the API server no longer has is a success with nothing to
        tear down.
  --pod-eni-source kubernetes|static
        Where --enable-pod-eni learns about branch pods (default
        kubernetes). "kubernetes" GETs the pod from the API server on
        every ADD (and on a DEL the pool cannot answer), with the
        in-cluster service account, or with --kubeconfig; ipamd refuses
        to start when it has neither. "static" reads --pod-eni-file
        once, at startup, for use with --cloud memory and tests.
  --kubeconfig PATH
        Kubeconfig file for --pod-eni-source kubernetes, instead of the
        in-cluster configuration.
  --pod-eni-file PATH
        JSON file for --pod-eni-source static: an object mapping
        "namespace/name" to one element of the annotation, e.g.
          {"default/web": {"eniId": "eni-0a1b2c3d4e5f60718",
            "ifAddress": "0a:1b:2c:3d:4e:5f", "privateIp": "192.168.5.20",
            "vlanID": 7, "subnetCidr": "192.168.5.0/24"}}
        (ipv6Addr and subnetV6Cidr for --ipv6). Pods it does not name
        are regular pods. Unknown fields, a vlanID outside 1..4094, a MAC
        or address that does not parse stop ipamd at startup.
  --reject-version-mismatch
        Refuse calls from a plugin whose ClientVersion is not this build's
        version, with FailedPrecondition "wrong client version", as the
        reference does. Off by default: any version is accepted and logged.
  --version
        Print the build version and exit.
  -h, --help
        Print this help and exit.

Exit status: 0 after SIGTERM/SIGINT (or --help, --version), 1 when the
daemon cannot start (socket, inventory, pod-ENI source), 2 for a usage
error.
`

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig))
}

// run is the whole command; it serves until stop delivers a signal. It is
// separate from main so tests can drive it without a process.
func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal) int {
	fs := flag.NewFlagSet("ipamd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help by usage
	socket := fs.String("socket", ipamd.DefaultSocket, "")
	cloudKind := fs.String("cloud", "memory", "")
	instanceType := fs.String("instance-type", "m5.large", "")
	level := fs.String("log-level", "info", "")
	format := fs.String("log-format", "text", "")
	strict := fs.Bool("reject-version-mismatch", false, "")
	ipv6 := fs.Bool("ipv6", os.Getenv("ENABLE_IPv6") == "true", "")
	version := fs.Bool("version", false, "")
	var pe podENIFlags
	fs.BoolVar(&pe.enabled, "enable-pod-eni", os.Getenv("ENABLE_POD_ENI") == "true", "")
	fs.StringVar(&pe.source, "pod-eni-source", sourceKubernetes, "")
	fs.StringVar(&pe.file, "pod-eni-file", "", "")
	fs.StringVar(&pe.kubeconfig, "kubeconfig", "", "")
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ipamd: "+format+"\nRun 'ipamd --help' for usage.\n", a...)
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, usage, ipamd.DefaultSocket, strings.Join(memory.Known(), ", "))
			return exitOK
		}
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *version {
		fmt.Fprintln(stdout, "ipamd", buildVersion)
		return exitOK
	}
	log, err := logger(stderr, *level, *format)
	if err != nil {
		return usageErr("%v", err)
	}
	if *cloudKind != "memory" {
		return usageErr("--cloud %q is not supported: the only cloud of this build is \"memory\"", *cloudKind)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := pe.check(set); err != nil {
		return usageErr("%v", err)
	}
	// The trunk ENI is what the VPC resource controller attaches to a node
	// with security groups for pods; the memory cloud does the same.
	inv, err := memory.NewWithOptions(*instanceType, memory.Options{Trunk: pe.enabled})
	if err != nil {
		return usageErr("--instance-type: %v", err)
	}
	src, err := pe.sourceOf(buildVersion)
	if err != nil {
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	cfg := ipamd.Config{SocketPath: *socket, Inventory: inv, Logger: log,
		Version: buildVersion, RejectVersionMismatch: *strict, IPv6: *ipv6, PodENI: src}
	if src != nil {
		inst, err := inv.Instance(context.Background())
		if err != nil {
			log.Error("ipamd cannot start", "error", err)
			return exitFailed
		}
		cfg.TrunkLinkIndex = trunkLinkIndex(inst, *cloudKind)
	}
	d, err := ipamd.New(cfg)
	if err != nil {
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	if err := d.Start(); err != nil { // logs the startup line
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	s := <-stop
	log.Info("ipamd stopping", "signal", s.String())
	d.Stop()
	return exitOK
}

// logger builds the slog logger the flags ask for. It accepts the four
// level names only, not slog's "info+2" forms, so a typo is an error.
func logger(w io.Writer, level, format string) (*slog.Logger, error) {
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	lvl, ok := levels[level]
	if !ok {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
