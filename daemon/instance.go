package daemon

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/chanstate"
)

// Instance is one open backend of one task.
type Instance struct {
	// ID names the instance in every request.
	ID []byte
	// Task, Kind, KeyGroups and MaxParallelism are fixed at open.
	Task           backend.TaskID
	Kind           backend.Kind
	KeyGroups      backend.KeyGroupRange
	MaxParallelism int
	// RestoredFrom is the checkpoint the instance was restored from (0:
	// none or a savepoint).
	RestoredFrom uint64
	// VerifyKeyGroups is OpenParams.VerifyKeyGroups, fixed at open.
	VerifyKeyGroups bool
	// Backend does the work. Its methods are safe for concurrent use.
	Backend backend.Backend
	// Ops records operations into the daemon's metrics.
	Ops OpCounter

	d   *Daemon
	dir string
	// states are the registered states by name, replaced whole when
	// RegisterStates adds some (view.go), so the batch path reads it
	// without a lock.
	states atomic.Pointer[map[string]stateInfo]
	// fence is the task's fencing token taken at open (0: not fenced).
	fence uint64
	// ops is the instance's operator state (opstate.go).
	ops *operatorState
	// timerMu makes PollTimers, which may put timers back, atomic with
	// respect to timer deletions and to the synchronous parts of
	// snapshots.
	timerMu sync.Mutex

	mu      sync.Mutex
	streams int
	pending int // asynchronous snapshot parts still running
	// detached is when the last batch stream ended (or the instance
	// opened, before its first); zero while a stream is attached.
	detached time.Time
	// reaped: the idle reaper is closing it; no stream may attach.
	reaped bool
	closed bool
	// cl is the instance's changelog state (changelog.go); nil when it is
	// not in changelog mode. Guarded by mu.
	cl *clState
	// chans is the restored channel state, spooled on local disk until
	// the instance closes; nil when there is none.
	chans *chanstate.Restored
	// views are the instance's read views (view.go); regMu serializes
	// RegisterStates.
	views viewSet
	regMu sync.Mutex
	// ext is the externally owned mode's state (external.go); nil in the
	// daemon's own mode. Set at open.
	ext *external
}

func newInstance(d *Daemon, id []byte, task backend.TaskID, kind backend.Kind, b backend.Backend, dir string, restoredFrom uint64,
	ops []backend.OperatorList) *Instance {
	info := b.Info()
	in := &Instance{
		ID: id, Task: task, Kind: kind, KeyGroups: info.KeyGroups, MaxParallelism: info.MaxParallelism,
		RestoredFrom: restoredFrom, Backend: b,
		Ops: OpCounter{m: d.m, b: BackendIndex(kind)},
		d:   d, dir: dir, ops: newOperatorState(ops),
		detached: time.Now(),
	}
	in.setStates(b.States())
	return in
}

type stateInfo struct {
	name string
	kind backend.StateKind
}

// IDString is the instance id in hex, for logs and messages.
func (in *Instance) IDString() string { return hex.EncodeToString(in.ID) }

// StateKind returns the kind of a registered state (0 if unknown), for
// metrics; the backend does the authoritative checks.
func (in *Instance) StateKind(state string) backend.StateKind { return (*in.states.Load())[state].kind }

// State returns the registered name equal to raw (without allocating) and
// its kind; for a name that is not registered, a copy of raw and kind 0.
func (in *Instance) State(raw []byte) (string, backend.StateKind) {
	if s, ok := (*in.states.Load())[string(raw)]; ok {
		return s.name, s.kind
	}
	return string(raw), 0
}

// MaxValueSize is the largest key, namespace, value or user key accepted.
func (in *Instance) MaxValueSize() int { return in.d.cfg.MaxValueSize }

// AcquireStream counts a batch stream against the instance's limit; call
// the returned function when the stream ends.
func (in *Instance) AcquireStream() (release func(), err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.reaped {
		return nil, fmt.Errorf("daemon: %w %s of %s: closed", ErrUnknownInstance, in.IDString(), in.Task)
	}
	if in.streams >= in.d.cfg.MaxStreamsPerInstance {
		return nil, fmt.Errorf("daemon: %w: instance %s of %s has %d batch streams open (max %d)",
			ErrLimit, in.IDString(), in.Task, in.streams, in.d.cfg.MaxStreamsPerInstance)
	}
	in.streams++
	in.detached = time.Time{}
	in.d.m.Streams.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			if in.streams--; in.streams == 0 {
				in.detached = time.Now()
			}
			in.mu.Unlock()
			in.d.m.Streams.Add(-1)
		})
	}, nil
}

// checkOpen fails once the instance is closed.
func (in *Instance) checkOpen() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return fmt.Errorf("daemon: %w %s of %s: closed", ErrUnknownInstance, in.IDString(), in.Task)
	}
	return nil
}

// RestoredChannels is the channel state the instance restored (nil: none);
// ReadChannelState streams it.
func (in *Instance) RestoredChannels() *chanstate.Restored { return in.chans }

// startSnapshot counts an asynchronous part that will run.
func (in *Instance) startSnapshot() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return fmt.Errorf("daemon: %w %s of %s: closed", ErrUnknownInstance, in.IDString(), in.Task)
	}
	in.pending++
	return nil
}

// finishSnapshot ends one; the last one after Close removes the working
// directory (lsm snapshots read their files from it).
func (in *Instance) finishSnapshot() {
	in.mu.Lock()
	in.pending--
	remove := in.closed && in.pending == 0
	in.mu.Unlock()
	if remove {
		in.removeDir()
	}
}

// close closes the backend and removes the working directory once no
// snapshot reads it any more.
func (in *Instance) close() error {
	in.releaseViews()
	in.closeExternal()
	return in.closeBackend()
}

// closeInBackground is close for an instance the daemon let go of (closed
// by its task, or replaced by a new open of it): its views and uploads
// stop at once, and the backend closes in the background, where an error
// is logged. An lsm backend's close waits for Pebble's running
// compactions, hundreds of milliseconds under a checkpointing load, and
// the task waits for the close: Flink disposes a failed task's backend
// before it reports the failure, so the close was part of every failover.
// Nothing reaches the instance any more (it is out of the daemon's
// tables); Shutdown waits for these closes.
func (in *Instance) closeInBackground() {
	in.releaseViews()
	in.closeExternal()
	d := in.d
	closeBackend := func() {
		if err := in.closeBackend(); err != nil {
			d.log.Warn("instance close", "task", in.Task.String(), "instance", in.IDString(), "err", err)
		}
	}
	d.mu.Lock()
	if d.closing {
		// Shutdown may be waiting for closers already: close here.
		d.mu.Unlock()
		closeBackend()
		return
	}
	d.closers.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.closers.Done()
		closeBackend()
		if d.keeper != nil {
			d.keeper.nudge() // the instance's log was let go of
		}
	}()
}

// closeBackend closes the backend and the restored channel state, and
// removes the working directory once no snapshot reads it any more.
func (in *Instance) closeBackend() error {
	err := in.Backend.Close()
	if errors.Is(err, backend.ErrClosed) {
		err = nil
	}
	in.mu.Lock()
	in.closed = true
	remove := in.pending == 0
	chans := in.chans
	in.mu.Unlock()
	if chans != nil {
		if cerr := chans.Close(); cerr != nil {
			in.d.log.Warn("remove restored channel state", "task", in.Task.String(), "err", cerr)
		}
	}
	if remove {
		in.removeDir()
	}
	if err != nil {
		return fmt.Errorf("daemon: close %s: %w", in.Task, err)
	}
	return nil
}

func (in *Instance) removeDir() {
	if err := os.RemoveAll(in.dir); err != nil {
		in.d.log.Warn("remove instance directory", "dir", in.dir, "err", err)
	}
}

// DeleteTimer is Backend.DeleteTimer, ordered with PollTimers: a timer a
// poll puts back is never one deleted meanwhile.
func (in *Instance) DeleteTimer(state string, t backend.Timer) error {
	in.timerMu.Lock()
	defer in.timerMu.Unlock()
	return in.Backend.DeleteTimer(state, t)
}

// PollTimers removes and returns the timers of state at or below watermark
// in timestamp order, up to limit (<= 0: all), as Backend.PollTimers
// does, but only as many as keep accepts: keep gets the polled timers and
// returns how many to deliver (a prefix); the rest are registered again,
// so they stay for the next poll. A snapshot never sees them missing.
// more says whether due timers remain after the returned ones: a full
// page (limit reached) with more due says so as well as a page cut by
// keep, so that a client polling while more is set fires every due timer
// (issue 37: a full page said nothing, and the rest waited for the next
// watermark). If timers cannot be registered again, every polled timer is
// returned (a timer is never lost) with the error of that.
func (in *Instance) PollTimers(state string, watermark int64, limit int, keep func([]backend.Timer) int) (ts []backend.Timer, more bool, err error) {
	in.timerMu.Lock()
	defer in.timerMu.Unlock()
	// One timer past the page tells whether more are due; it goes back
	// with those keep refuses. Backend.PollTimers has no "more" of its
	// own, and one re-registered timer per full page is cheap.
	probe := limit
	if limit > 0 {
		probe = limit + 1
	}
	ts, err = in.Backend.PollTimers(state, watermark, probe)
	if err != nil {
		return nil, false, err
	}
	k := keep(ts)
	if k < 0 || k > len(ts) {
		k = len(ts)
	}
	if limit > 0 && k > limit {
		k = limit
	}
	if k == len(ts) {
		return ts, false, nil
	}
	for i, t := range ts[k:] {
		if err := in.Backend.RegisterTimer(state, t); err != nil {
			// Deliver what could not go back (and what went back stays
			// registered: it is delivered twice rather than never).
			return append(ts[:k:k], ts[k+i:]...), false,
				fmt.Errorf("daemon: poll timers of state %q of %s: put back a polled timer past the page or the response limit: %w", state, in.Task, err)
		}
	}
	return ts[:k], true, nil
}

// snapshotLocked runs fn (a snapshot's synchronous part) with no poll half
// done.
func (in *Instance) snapshotLocked(fn func() error) error {
	in.timerMu.Lock()
	defer in.timerMu.Unlock()
	return fn()
}
