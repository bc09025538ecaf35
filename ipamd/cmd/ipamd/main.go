// Command ipamd is vpccni's IP address management daemon. Run it with
// --help for what it does and its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig))
}

// run is the whole command; it serves until stop delivers a signal. It is
// separate from main so tests can drive it without a process.
func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal) int {
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ipamd: "+format+"\nRun 'ipamd --help' for usage.\n", a...)
		return exitUsage
	}
	f, err := parseFlags(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, usage, ipamd.DefaultSocket, strings.Join(memory.Known(), ", "))
		return exitOK
	}
	if err != nil {
		return usageErr("%v", err)
	}
	if f.version {
		fmt.Fprintln(stdout, "ipamd", buildVersion)
		return exitOK
	}
	sink, closeLog, err := logSink(f.logFile, stdout, stderr)
	if err != nil {
		return usageErr("%v", err)
	}
	defer closeLog()
	log, err := logger(sink, f.level, f.format)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg, cleanup, err := f.daemonConfig(log)
	defer cleanup()
	var uerr usageError
	if errors.As(err, &uerr) {
		return usageErr("%v", err)
	}
	if err != nil {
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	reportEnvironment(log, os.Environ(), os.Getenv)
	d, err := ipamd.New(cfg)
	if err != nil {
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	f.daemon.Store(d)
	if err := d.Start(); err != nil { // logs the startup line
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.serveHTTP(ctx, d, cfg, log); err != nil {
		d.Stop()
		log.Error("ipamd cannot start", "error", err)
		return exitFailed
	}
	s := <-stop
	log.Info("ipamd stopping", "signal", s.String())
	d.Stop()
	return exitOK
}

// usageError marks a configuration mistake (exit 2) as opposed to a
// failure to start (exit 1).
type usageError struct{ error }
