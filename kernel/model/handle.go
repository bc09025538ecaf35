package model

import (
	"fmt"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// handle is a kernel.API bound to one namespace of a Kernel. It holds the
// namespace itself, not just its path, so a handle on a deleted namespace
// fails even if another namespace is later created at the same path (as a
// real handle keeps pointing at the namespace it opened).
type handle struct {
	k      *Kernel
	path   string
	n      *netns
	closed bool
}

// with runs fn on the handle's namespace under the machine's lock.
func (h *handle) with(fn func(n *netns) error) error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if h.closed {
		return fmt.Errorf("handle on %s is closed: %w", h.path, syscall.EBADF)
	}
	if h.k.ns[h.path] != h.n {
		return fmt.Errorf("namespace %s: %w", h.path, kernel.ErrNamespaceGone)
	}
	return fn(h.n)
}

// change runs fn, which changes the namespace, under the machine's lock,
// and counts the change (Kernel.Generation): a caller that watches many
// machines re-reads only the ones that changed. A failed change counts
// too; counting one too many only costs the watcher a re-read.
func (h *handle) change(fn func(n *netns) error) error {
	return h.with(func(n *netns) error {
		h.k.gen++
		return fn(n)
	})
}

// Generation is the machine's change count (Kernel.Generation), for a
// holder of a handle alone: ipamd's reconciler skips a pass over a
// kernel that has not changed since its last pass settled.
func (h *handle) Generation() uint64 { return h.k.Generation() }

// Close releases the handle; the namespace stays.
func (h *handle) Close() error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.closed = true
	return nil
}

func noLink(name string) error { return fmt.Errorf("link %s: %w", name, syscall.ENODEV) }

func noIndex(index int) error { return noLink(fmt.Sprintf("index %d", index)) }
