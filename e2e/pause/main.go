// Command pause is the e2e suite's sandbox ("pause") image: it holds the
// pod's namespaces open and exits when the runtime stops the sandbox. It
// is built statically (CGO_ENABLED=0) so the image needs nothing else: no
// registry is reachable here to pull the usual one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of its PID namespace it gets only the signals it handles:
	// without this handler SIGTERM would be ignored and every stop would
	// wait for the runtime's SIGKILL timeout.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
