// vpccni-node is the entrypoint of vpccni's aws-node image: "init" is the
// aws-vpc-cni-init container's job, "run" the aws-node container's. With
// it the reference's DaemonSet runs vpccni with only its images changed.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// buildVersion is set at link time (-X main.buildVersion=...).
var buildVersion = "dev"

// Exit codes: 1 a setting or a step on the node failed (the reference's),
// 2 the command line is wrong; "run" otherwise exits with ipamd's status.
const (
	exitFailed = 1
	exitUsage  = 2
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func failed(err error) error { return &exitError{exitFailed, err} }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	root := newRoot(log, getenv)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			for _, line := range strings.Split(ee.err.Error(), "\n") {
				fmt.Fprintf(stderr, "vpccni-node: %s\n", line)
			}
		}
		return ee.code
	}
	// cobra's own: an unknown command or flag.
	fmt.Fprintf(stderr, "vpccni-node: %v\nRun 'vpccni-node --help' for usage.\n", err)
	return exitUsage
}

func newRoot(log *slog.Logger, getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:   "vpccni-node",
		Short: "The aws-node containers' entrypoint: install vpc-cni, set the node up, run ipamd",
		Long: `vpccni-node does on a node what the reference AWS VPC CNI's aws-node image
does, so that the reference's DaemonSet runs vpccni with only its images
changed:

  vpccni-node init   the aws-vpc-cni-init container: install the CNI
                     plugins and set the node's sysctls, then exit.
  vpccni-node run    the aws-node container: check the settings, install
                     vpc-cni, start ipamd, and once ipamd answers its
                     health check write the conflist; then live as long
                     as ipamd does.

Both read the reference's environment variables (docs/settings.md lists
every one and what vpccni does with it). A value the reference would take
silently as its default is refused here, naming the variable.`,
		Version:       buildVersion,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{exitUsage, fmt.Errorf("%s: %w (see %s --help)", c.CommandPath(), err, c.CommandPath())}
	})
	root.AddCommand(newInit(log, getenv), newRun(log, getenv))
	return root
}

// besideMe is a path next to this executable: the image keeps ipamd and
// the plugins beside vpccni-node.
func besideMe(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}
