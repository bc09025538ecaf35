// Package nsthread runs a function on an OS thread inside another network
// namespace without ever letting that thread run anything else there.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn on a new locked thread after enter has moved it into
// another namespace, then puts the thread back before unlocking it, so no
// goroutine ever runs in a namespace it did not ask for. A thread that
// cannot go back stays locked and the runtime discards it when the
// goroutine ends.
func Run(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			if rerr := netns.Set(orig); rerr != nil {
				errc <- errors.Join(err, rerr)
				return
			}
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the original namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
