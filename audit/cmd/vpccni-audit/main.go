// vpccni-audit reads one node's pod networking (kernel, ipamd's
// checkpoint, the runtime's sandboxes, ipamd's memory) and reports what is
// leaked, missing, stray, double-held or misrouted, with the evidence and
// the command that shows each; --fix removes the leaks the ownership rules
// prove are a pod's. It works on nodes running vpccni or the reference.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vpccni/vpccni/audit/cri"
	"github.com/vpccni/vpccni/audit/ipamdview"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// buildVersion is set at link time (-X main.buildVersion=...).
var buildVersion = "dev"

// Exit codes.
const (
	exitClean    = 0
	exitFindings = 1
	exitCannot   = 2 // the node could not be read, or the command line is wrong
)

// options are the command line's.
type options struct {
	netns        string
	checkpoint   string
	criEndpoint  string
	introspect   string
	vethPrefixes []string
	json         bool
	fix          bool
	dryRun       bool
	settle       time.Duration
	timeout      time.Duration
}

// deps are the command's seams: the kernel it opens namespaces with, and
// how it sleeps between the two audits of --fix.
type deps struct {
	opener kernel.Opener
	sleep  func(time.Duration)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv, deps{opener: linux.Opener{}, sleep: time.Sleep}))
}

// cannot is an error that ends the command with exitCannot.
type cannot struct{ err error }

func (c cannot) Error() string { return c.err.Error() }

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string, d deps) int {
	code := exitClean // --help and --version run nothing and end here
	root := newRoot(getenv, func(o *options) error {
		var err error
		code, err = runAudit(o, stdout, stderr, d)
		return err
	})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "vpccni-audit: %s\n", line)
		}
		var c cannot
		if errors.As(err, &c) {
			return exitCannot
		}
		fmt.Fprintln(stderr, "Run 'vpccni-audit --help' for usage.")
		return exitCannot
	}
	return code
}

func newRoot(getenv func(string) string, do func(*options) error) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "vpccni-audit",
		Short: "Find and prove a node's leaked, missing, stray, double-held and misrouted pod networking",
		Long: `vpccni-audit reads one node, as the node itself shows it, and reports every
pod networking object or allocation that is wrong, with its evidence and the
command that shows it:

  LEAKED            a pod rule (512, 1536, 10), host route, veth or VLAN link
                    of an address no allocation holds and no live pod has
  MISSING           a live pod's rule, route or allocation that is not there
  STRAY ALLOCATION  an allocation whose pod is gone: the address is held for ever
  DOUBLE            an address given to two pods
  MISROUTE          the kernel's own lookup sends a live pod's traffic out of
                    the wrong ENI (or not to the pod at all)

It reads the node's network namespace (links, routes of every table, rules),
ipamd's checkpoint (the reference's or vpccni's), and, when they answer, the
container runtime's sandboxes (CRI, read-only) and ipamd's introspection.
Which rules are a pod's is decided by the same ownership rules as the
plugin's teardown: another agent's rules at the same priorities are never
reported. Without the runtime's answer, a pod whose veth exists is taken for
live, and --fix leaves such veths alone.

--fix plans the removal of the LEAKED objects those rules prove are a pod's
(two audits --settle apart must agree); it only prints the plan unless
--dry-run=false is given. MISSING, STRAY, DOUBLE and MISROUTE are reported,
never fixed. Reading needs no privilege; removing needs CAP_NET_ADMIN.

Exit status: 0 the node is clean, 1 findings, 2 the node could not be read
(or the command line is wrong).`,
		Version:       buildVersion,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE:          func(*cobra.Command, []string) error { return do(o) },
	}
	root.CompletionOptions.DisableDefaultCmd = true
	prefix := getenv("AWS_VPC_K8S_CNI_VETHPREFIX")
	if prefix == "" {
		prefix = "eni"
	}
	introspect := getenv("INTROSPECTION_BIND_ADDRESS")
	if introspect == "" {
		introspect = ipamdview.DefaultAddress
	}
	ckpt := getenv(checkpoint.EnvPath)
	if ckpt == "" {
		ckpt = checkpoint.DefaultPath
	}
	f := root.Flags()
	f.StringVar(&o.netns, "netns", "", "audit the network namespace at this path (default: this process's own, the node's with hostNetwork)")
	f.StringVar(&o.checkpoint, "checkpoint", ckpt, "ipamd's checkpoint ("+checkpoint.EnvPath+"); \"\" to audit without one")
	f.StringVar(&o.criEndpoint, "cri-endpoint", cri.DefaultEndpoint, "the runtime's CRI socket; \"\" not to ask")
	f.StringVar(&o.introspect, "introspection", introspect, "ipamd's introspection, HOST:PORT or unix:PATH (INTROSPECTION_BIND_ADDRESS); \"\" not to ask")
	f.StringSliceVar(&o.vethPrefixes, "veth-prefix", []string{prefix}, "host veth prefixes of pods (AWS_VPC_K8S_CNI_VETHPREFIX); strict branch pods' \"vlan\" is always added")
	f.BoolVar(&o.json, "json", false, "print one JSON document instead of the table")
	f.BoolVar(&o.fix, "fix", false, "plan the removal of the LEAKED objects proven a pod's")
	f.BoolVar(&o.dryRun, "dry-run", true, "with --fix, only print what would be removed; --dry-run=false removes it")
	f.DurationVar(&o.settle, "settle", 5*time.Second, "with --fix, the wait between the two audits that must agree (an ADD in flight is never a leak)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the runtime and for ipamd")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see vpccni-audit --help)", err)
	})
	return root
}
