package checkpoint

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("checkpoint writer is closed")

// WriterOptions tunes a Writer.
type WriterOptions struct {
	// PerCallSync makes every Commit do its own WriteFile, one at a time:
	// the straightforward way, kept to measure group commit against.
	PerCallSync bool
	// OnWrite, if set, is called after every WriteFile with how long it
	// took and its error, before the Commits it serves return. It runs on
	// the writing goroutine: keep it short.
	OnWrite func(d time.Duration, err error)
}

// Writer persists ipamd's state on demand. Every pod ADD and DEL changes
// the state and must not answer the runtime before the change is on disk,
// and each durable write costs two fsyncs; under a burst of pod starts the
// Writer lets all callers that arrive while a write is running share the
// next one (one snapshot, one WriteFile), so the number of writes follows
// the disk's speed instead of the number of pods.
type Writer struct {
	path     string
	snapshot func() File
	opt      WriterOptions

	mu     sync.Mutex
	closed bool
	// pending collects the Commits that the next write will serve; nil
	// when nobody is waiting for a write that has not started.
	pending *batch
	// flusherDone is non-nil while the flusher goroutine runs and is
	// closed when it exits.
	flusherDone chan struct{}

	// perCallTurn is the PerCallSync mode's lock, a channel so that
	// waiting for it can be given up when the caller's context ends.
	perCallTurn chan struct{}
}

// batch is the set of Commits served by one write.
type batch struct {
	done    chan struct{} // closed once err is set
	err     error
	callers int // Commits that joined, for tests and diagnostics
}

// NewWriter returns a Writer that writes snapshot() to path with WriteFile.
// snapshot is called from the Writer's own goroutine, once per write, and
// must return a copy that is safe to encode while the caller keeps
// changing its state (take the state's lock inside snapshot).
func NewWriter(path string, snapshot func() File, opt WriterOptions) *Writer {
	return &Writer{
		path:        path,
		snapshot:    snapshot,
		opt:         opt,
		perCallTurn: make(chan struct{}, 1),
	}
}

// Commit returns once a write that started after Commit was called has
// finished, so every change the caller made before calling Commit is on
// disk if it returns nil; it returns that write's error otherwise. If ctx
// ends first Commit returns ctx.Err(); the write still happens and the
// Writer stays usable. After Close, Commit returns ErrClosed.
func (w *Writer) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.opt.PerCallSync {
		return w.commitAlone(ctx)
	}

	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.pending == nil {
		w.pending = &batch{done: make(chan struct{})}
	}
	b := w.pending
	b.callers++
	if w.flusherDone == nil {
		w.flusherDone = make(chan struct{})
		go w.flush(w.flusherDone)
	}
	w.mu.Unlock()

	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush writes batches until none is pending, then exits; the next Commit
// starts a new one. A batch is detached from pending before its snapshot
// is taken, so every Commit in it was called before the write started.
func (w *Writer) flush(done chan struct{}) {
	for {
		w.mu.Lock()
		b := w.pending
		w.pending = nil
		if b == nil {
			w.flusherDone = nil
			w.mu.Unlock()
			close(done)
			return
		}
		w.mu.Unlock()

		b.err = w.write()
		close(b.done)
	}
}

// write takes a snapshot and writes it, reporting to OnWrite.
func (w *Writer) write() error {
	f := w.snapshot()
	start := time.Now()
	err := WriteFile(w.path, f)
	if w.opt.OnWrite != nil {
		w.opt.OnWrite(time.Since(start), err)
	}
	return err
}

// commitAlone is Commit for PerCallSync: one write per call, in turn.
func (w *Writer) commitAlone(ctx context.Context) error {
	select {
	case w.perCallTurn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-w.perCallTurn }()

	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return w.write()
}

// Close waits for the write in flight, and for the Commits already waiting
// for the next one to be written, then makes later Commits fail with
// ErrClosed. It is safe to call more than once.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	flusherDone := w.flusherDone
	w.mu.Unlock()

	if flusherDone != nil {
		<-flusherDone
	}
	// A PerCallSync write holds the turn for its whole duration.
	w.perCallTurn <- struct{}{}
	<-w.perCallTurn
}
