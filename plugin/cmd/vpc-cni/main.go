// Command vpc-cni is the CNI plugin binary a runtime executes (conflist
// "type": "vpc-cni"). It speaks CNI 0.3.1, 0.4.0 and 1.0.0 on stdin/stdout
// and asks ipamd for addresses over gRPC.
package main

import (
	"github.com/vpccni/vpccni/internal/failpoint"

	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netns"

	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/plugin"
)

// buildVersion is set with -ldflags "-X main.buildVersion=…".
var buildVersion = "dev"

const help = `vpc-cni — the vpccni CNI plugin (AWS VPC CNI pod networking)

A container runtime runs this binary; it is not meant to be run by hand.
The runtime sets CNI_COMMAND (ADD, DEL, CHECK, GC, STATUS, VERSION), CNI_CONTAINERID,
CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH, and writes the network
configuration on stdin. The result or a CNI error (JSON with "code" and
"msg") is written to stdout.

ADD asks ipamd for an address and builds the pod's network: a veth pair
(host side <vethPrefix><11 hex of sha1(namespace.name)>), the pod's
169.254.1.1 gateway and /32 address (IPv6: fe80::1 and a /128, after
duplicate address detection), a host route, rule 512 "to IP lookup main"
and, for an address of a secondary ENI, rule 1536 "from IP lookup
<table>". A branch-ENI pod (security groups for pods) also gets the VLAN
link vlan.eth.<id> on the trunk and table id+100, with prio-10 iif rules
(strict; host veth vlan<hash>) or rules 512/1536 (standard). The result
carries what DEL needs to tear the pod down without ipamd.

CHECK (CNI 0.4.0 and later) verifies from the prevResult that every object
of the pod is still there, and names what is missing (code 104).

GC (CNI 1.1.0) gets the runtime's valid attachments; every attachment of
this network ipamd holds an address for that is not among them is torn
down (only what the ownership checks prove is its own) and its address
given back. STATUS (CNI 1.1.0) succeeds when ipamd answers its health
check and has an address to give; else code 50 says which it lacks.

DEL tears the pod down from the prevResult and the attachment record
ADD wrote first and then tells ipamd; without them it asks ipamd, or
reads the pod's namespace. It never stops because ipamd is unreachable,
slow or has forgotten the pod, and it removes an address's rules only
while the address is still this pod's.

Network configuration fields:
  vethPrefix          host veth prefix, at most 4 characters (default "eni")
  mtu                 pod MTU as a string, 576-9001 (default "9001")
  podSGEnforcingMode  "strict" (default) or "standard", for branch-ENI pods
  pluginLogFile       append JSON logs here (mode 0600, never through a
                      symlink); default, and when it cannot be opened
                      safely: stderr
  pluginLogLevel      debug, info (default), warn or error, in any case;
                      the driver's lines go to the same log
  ipamdAddress        unix:///path (default unix:///var/run/aws-node/ipamd.sock)
                      or a loopback IP:port (127.0.0.1:50051, [::1]:50051)
  ipamdTimeout        deadline of each call to ipamd (default "5s")
  journalFile         append one JSON line per invocation here (verb, CNI
                      environment, stdin, result or error, duration, every
                      ipamd call with its answer), mode 0600, never through a
                      symlink; stops at 64 MiB. Replay it on the kernel model
                      with "replay journal FILE". A journal that cannot be
                      written is a warning on stderr, never an error.
  resultFormat        how the ADD result carries what DEL needs:
                      "reference" (default): the reference plugin's layout
                      (route table in the container interface's "mac", a
                      dummy<hash> interface with the VLAN and device), which
                      the reference can read back and tear down; for
                      containerd and kubelet nodes that may swap plugins.
                      "spec": every field as the CNI spec means it (real
                      MACs, names and sandboxes, a branch pod's VLAN link
                      under its own name, no dummy), for podman and other
                      strict libcni callers, which refuse the reference's.
                      DEL then takes the tables from the node's ENIs; the
                      reference cannot tear down a pod from a spec-format
                      result. A prevResult in the other format is a bad
                      prevResult (code 7).
  stateDir            the plugin's node-local state, a clean absolute path
                      (default /var/lib/cni/vpc-cni): ADD records each
                      attachment in stateDir/attachments (one file each,
                      mode 0600), DEL reads it as a source after the
                      prevResult (the only one when a second DEL has no
                      prevResult and no netns and ipamd has forgotten the
                      pod) and removes it once the pod is torn down; a
                      record that cannot be read is renamed *.bad. GC removes
                      the records of what it collects. A record that cannot
                      be written fails the ADD (rolled back, code 102).

Error codes: 4 bad CNI_ARGS/CNI_IFNAME, 6 undecodable config, 7 invalid
config, prevResult or attachment record, 8 bad netns, 50 not ready (STATUS), 11 retry later (ipamd unreachable on
ADD, teardown incomplete on DEL), 100 ipamd error, 101 no address,
102 setup failed (rolled back), 103 unsupported mode, 104 CHECK found
an object missing.

Flags: -h/--help prints this; --version prints the build version. A
runtime passes no arguments: any other argument is an error (exit 2).
`

// Exit statuses of the command line (a CNI invocation's are skel's).
const (
	exitOK    = 0
	exitUsage = 2
)

// commandLine handles the arguments: --help and --version answer and
// stop; a runtime passes none, so anything else is a mistake said on
// stderr. done is false when the plugin should go on to serve CNI.
func commandLine(args []string, stdout, stderr io.Writer) (exit int, done bool) {
	if len(args) == 0 {
		return exitOK, false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, help)
		return exitOK, true
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, "vpc-cni", buildVersion)
		return exitOK, true
	}
	what := "argument"
	if strings.HasPrefix(args[0], "-") {
		what = "flag"
	}
	fmt.Fprintf(stderr, "vpc-cni: unknown %s %q: a runtime runs vpc-cni without arguments (CNI_COMMAND and stdin); the only flags are --help and --version\n", what, args[0])
	return exitUsage, true
}

func main() {
	if code, done := commandLine(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	// Nil in every build but a "failpoints" one (the real-kernel suite's):
	// a production binary cannot be made to crash by its environment.
	fp, err := failpoint.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vpc-cni:", err)
		os.Exit(1)
	}
	// nil but in the test-only "legacydelete" build.
	legacyDel, err := deleteFlow()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vpc-cni:", err)
		os.Exit(1)
	}
	p := plugin.New(plugin.Env{
		DeleteFlow: legacyDel,
		Kernel:     linux.Opener{},
		Log:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		IsHostNS:   isHostNS,
		Version:    buildVersion,
		Failpoints: fp,
		// Beside ipamd's socket, where ipamd drains it when it starts.
		ReleaseQueue: plugin.QueueBesideSocket,
	})
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			res, err := p.Add(args)
			if err != nil {
				return err
			}
			return res.Print()
		},
		Del:    p.Del,
		Check:  p.Check,
		GC:     p.GC,
		Status: p.Status,
	}, version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0"), "vpc-cni "+buildVersion+" (vpccni); --help explains")
}

// isHostNS reports whether path is the namespace this process runs in.
func isHostNS(path string) (bool, error) {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return false, err
	}
	defer target.Close()
	self, err := netns.Get()
	if err != nil {
		return false, err
	}
	defer self.Close()
	return self.Equal(target), nil
}
