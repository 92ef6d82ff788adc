package changelog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/tiered"
)

// Options are what changelog mode adds to the inner backend's options.
type Options struct {
	// OpenInner opens the wrapped backend (heap, file or lsm) with the
	// options it is given: the caller's, with Restore replaced by the
	// bases of the changelog handles and Clock by the wrapper's clock.
	// Required. The backend it returns must implement
	// backend.CanonicalSnapshotter (every kind of this module does).
	OpenInner func(opts backend.Options) (backend.Backend, error)
	// Writer is the daemon's shared log writer. Required; not owned.
	Writer *dstl.Writer
	// Log is the store the Writer's segments are read back from on
	// restore. Required.
	Log dstl.LogStore
	// RunID tells this instance's log apart from the logs of earlier runs
	// of the same task. Default: 64 random bits in hex.
	RunID string
	// BeforePersist, when set, is called by a checkpoint's asynchronous
	// part right before it makes the instance's log durable up to the
	// checkpoint (Writer.Persist, which cuts the shared buffer into a
	// segment at once). The daemon waits there, bounded, until the other
	// tasks of the job on it have taken their synchronous parts: then
	// their changes up to the barrier are all buffered and the first
	// Persist's cut holds them all, one segment (one PUT on an object
	// store) per checkpoint instead of one per task. It must return when
	// ctx ends.
	BeforePersist func(ctx context.Context, checkpointID uint64)
}

// Backend is a backend.Backend in changelog mode. It also implements
// backend.Grouper, backend.ReadGrouper and backend.CanonicalSnapshotter.
type Backend struct {
	inner backend.Backend
	canon backend.CanonicalSnapshotter
	w     *dstl.Writer
	log   dstl.LogStore
	opts  backend.Options
	id    string // the instance's dstl writer id
	run   string

	// beforePersist is Options.BeforePersist (nil: none).
	beforePersist func(ctx context.Context, checkpointID uint64)

	// pin, when set, is the time the inner backend's clock returns: the
	// time of the write being applied (so the logged time is the one the
	// inner backend used) or of the change being replayed.
	pin atomic.Pointer[time.Time]

	smu    sync.RWMutex
	states map[string]backend.StateDescriptor

	// wmu orders every write and its append (the log must hold them in the
	// order the inner backend applied them) and Snapshot's cut.
	wmu     sync.Mutex
	closed  bool
	lastSeq uint64
	// A checkpoint may reference a base only if it uploads it itself, or
	// claims it as the first checkpoint to reference it, or a checkpoint
	// that references it was confirmed: the refcount registry deletes the
	// files of an aborted checkpoint that no confirmed one references, so
	// an unconfirmed base shared by two pending checkpoints could vanish
	// under the second (the rule lsm follows for its SSTs).
	conf      *materialization // latest confirmed base
	mat       *materialization // uploaded by Materialize, unconfirmed, unclaimed
	epoch     uint64           // bumped when the log lost a change
	matN      int
	truncated uint64
	// confirmed is the seq of the newest confirmed base: the log may be
	// truncated up to it, but never past the base of a snapshot still
	// pending (truncateLocked), whose Persist reads the log from its base.
	confirmed uint64
	pend      map[*pending]struct{}       // snapshots returned and neither run nor released
	replayDur time.Duration               // set by Open
	gw        groupWriter                 // Group's writer, its buffers kept between groups
	gents     []dstl.Entry                // logGroup's entries, kept between groups
	used      map[uint64]*materialization // checkpoint id -> its base, until notified
}

// materialization is one base: a canonical snapshot of the inner backend
// that covers the log up to seq.
type materialization struct {
	seq   uint64
	n     int
	epoch uint64
	// native: the inner backend's own snapshot (BaseSnapshotter), which it
	// must hear confirmed to reuse its files in the next one.
	native bool
	done   chan struct{}
	h      *backend.Handle // valid after done, when err is nil
	err    error
}

var (
	_ backend.Backend              = (*Backend)(nil)
	_ backend.Grouper              = (*Backend)(nil)
	_ backend.ReadGrouper          = (*Backend)(nil)
	_ backend.CanonicalSnapshotter = (*Backend)(nil)
)

// Open opens the inner backend from the bases of opts.Restore and replays
// their logs.
func Open(opts backend.Options, o Options) (*Backend, error) {
	opts.EnsureDefaults()
	var errs []error
	if o.OpenInner == nil {
		errs = append(errs, fmt.Errorf("%w: no inner backend", backend.ErrInvalidArgument))
	}
	if o.Writer == nil || o.Log == nil {
		errs = append(errs, fmt.Errorf("%w: no log writer or log store", backend.ErrInvalidArgument))
	}
	if err := errors.Join(append(errs, opts.Validate())...); err != nil {
		return nil, fmt.Errorf("changelog: open: %w", err)
	}
	if o.RunID == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		o.RunID = hex.EncodeToString(r[:])
	}
	b := &Backend{
		w: o.Writer, log: o.Log, opts: opts, run: o.RunID, beforePersist: o.BeforePersist,
		id:     fmt.Sprintf("%s/%s/%d/%s", opts.Task.Job, opts.Task.Operator, opts.Task.Subtask, o.RunID),
		states: map[string]backend.StateDescriptor{},
		used:   map[uint64]*materialization{},
		pend:   map[*pending]struct{}{},
	}
	ctx := context.Background()
	restores, err := readRestores(ctx, opts.RestoreStore, opts.Restore)
	if err != nil {
		return nil, err
	}
	io := opts
	io.Clock = b.now
	io.Restore = nil
	for _, r := range restores {
		io.Restore = append(io.Restore, r.base)
	}
	inner, err := o.OpenInner(io)
	if err != nil {
		return nil, err
	}
	canon, ok := inner.(backend.CanonicalSnapshotter)
	if !ok {
		_ = inner.Close()
		return nil, fmt.Errorf("%w: changelog: inner backend %T cannot take canonical snapshots", backend.ErrInvalidArgument, inner)
	}
	b.inner, b.canon = inner, canon
	for _, d := range inner.States() {
		b.states[d.Name] = d
	}
	t0 := time.Now()
	if err := b.replay(ctx, restores); err != nil {
		_ = inner.Close()
		return nil, err
	}
	if len(restores) > 0 {
		b.replayDur = time.Since(t0)
	}
	return b, nil
}

// now is the inner backend's clock.
func (b *Backend) now() time.Time {
	if t := b.pin.Load(); t != nil {
		return *t
	}
	return b.opts.Clock()
}

// Materialize takes a new base (a canonical snapshot of the inner backend)
// and waits until it is uploaded. Later checkpoints use it; once one of
// them completes, the log before it is truncated. It never waits on a
// checkpoint: a failed materialization changes nothing, and the next one
// starts afresh (FLINK-40302). The daemon calls it in the background every
// materialization interval. When nothing was logged since the newest base
// it does nothing: an idle instance costs its store no request.
func (b *Backend) Materialize(ctx context.Context) error {
	b.wmu.Lock()
	if b.closed {
		b.wmu.Unlock()
		return backend.ErrClosed
	}
	if b.baseIsCurrent() {
		// Nothing was logged since the newest base: a new one would be
		// the same state, uploaded again. An idle instance sends its
		// store nothing.
		b.wmu.Unlock()
		return nil
	}
	m, p, err := b.startMaterialization(ctx)
	b.wmu.Unlock()
	if err != nil {
		return err
	}
	b.runMaterialization(ctx, m, p)
	b.wmu.Lock()
	b.offer(m)
	b.wmu.Unlock()
	return m.err
}

// baseIsCurrent reports whether the newest base (offered or confirmed)
// already holds every change logged, in the current epoch. Call with wmu
// held.
func (b *Backend) baseIsCurrent() bool {
	newest := b.mat
	if newest == nil {
		newest = b.conf
	}
	return newest != nil && newest.err == nil && newest.epoch == b.epoch && newest.seq >= b.lastSeq
}

// startMaterialization freezes the inner backend's view at the log's
// current end. Call with wmu held.
func (b *Backend) startMaterialization(ctx context.Context) (*materialization, backend.PendingSnapshot, error) {
	b.matN++
	t := b.opts.Task
	dir := fmt.Sprintf("%s/shared/changelog/%s-%s-%d", t.Job, t.Dir(), b.run, b.matN)
	var p backend.PendingSnapshot
	var err error
	native := false
	if bs, ok := b.inner.(backend.BaseSnapshotter); ok {
		// The inner backend's own incremental snapshot: a materialization
		// uploads what changed since the last confirmed base, and a
		// restore reads native files.
		p, err = bs.BaseSnapshot(ctx, uint64(b.matN), dir)
		native = true
	} else {
		p, err = b.canon.CanonicalSnapshot(ctx, uint64(b.matN), b.opts.Store, dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("changelog: materialization %d of %s: %w", b.matN, t, err)
	}
	return &materialization{seq: b.lastSeq, n: b.matN, epoch: b.epoch, native: native, done: make(chan struct{})}, p, nil
}

// runMaterialization uploads m; the caller decides who may use it.
func (b *Backend) runMaterialization(ctx context.Context, m *materialization, p backend.PendingSnapshot) {
	h, err := p.Run(ctx)
	if err != nil {
		err = fmt.Errorf("changelog: materialization %d of %s: %w", m.n, b.opts.Task, err)
	}
	m.h, m.err = h, err
	close(m.done)
}

// offer makes m, uploaded and not referenced by any checkpoint, the next
// checkpoint's base unless a newer one is known or the log lost a change
// after m. Call with wmu held.
func (b *Backend) offer(m *materialization) {
	if m.err != nil || m.epoch != b.epoch || (b.conf != nil && b.conf.seq >= m.seq) || (b.mat != nil && b.mat.seq >= m.seq) {
		b.dropBase(m)
		return
	}
	old := b.mat
	b.mat = m
	if old != nil {
		b.dropBase(old)
	}
}

// dropBase tells the inner backend that no snapshot will reference base m
// any more (NotifyCheckpointAborted with the base's number), unless one
// still may: it is the confirmed or offered base, a pending snapshot uses
// it, or a checkpoint that used it may yet be confirmed. A BaseHolder
// (lsm remote mode) then lets go of m's files at once instead of at the
// next confirmation; nothing else needs to hear it. Call with wmu held.
func (b *Backend) dropBase(m *materialization) {
	if _, ok := b.inner.(backend.BaseHolder); !ok || !m.native || m == b.mat || m == b.conf {
		return
	}
	for p := range b.pend {
		if p.m == m {
			return
		}
	}
	for _, u := range b.used {
		if u == m {
			return
		}
	}
	b.inner.NotifyCheckpointAborted(uint64(m.n))
}

// Info implements backend.Backend.
func (b *Backend) Info() backend.Info { return b.inner.Info() }

// States implements backend.Backend.
func (b *Backend) States() []backend.StateDescriptor { return b.inner.States() }

// refreshes reports whether a read of state writes (refreshes the TTL), so
// that it must be logged.
func (b *Backend) refreshes(state string) bool {
	b.smu.RLock()
	d, ok := b.states[state]
	b.smu.RUnlock()
	return ok && d.TTL > 0 && d.TTLUpdate == backend.TTLOnReadAndWrite
}

// mutate applies a write to the inner backend at a pinned time and logs the
// changes it returns (none when it failed).
func (b *Backend) mutate(apply func() ([]*Change, error)) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	now := b.opts.Clock()
	b.pin.Store(&now)
	defer b.pin.Store(nil)
	cs, err := apply()
	if err != nil {
		return err
	}
	for _, c := range cs {
		c.Time = now.UnixNano()
		b.appendChange(c)
	}
	return nil
}

// appendChange logs c. Call with wmu held. A change the log refuses leaves
// the inner backend ahead of the log: the base is dropped, so the next
// checkpoint materializes a view that has the change.
func (b *Backend) appendChange(c *Change) {
	if b.closed {
		return
	}
	data := c.Encode(nil)
	if len(data) > dstl.MaxChangeSize && c.Op == OpListAppend && len(c.Values) > 1 {
		// An append of many values is the same as two appends of halves.
		half := len(c.Values) / 2
		l, r := *c, *c
		l.Values, r.Values = c.Values[:half], c.Values[half:]
		b.appendChange(&l)
		b.appendChange(&r)
		return
	}
	b.appendEncoded(c.KeyGroup(), data)
}

// appendEncoded logs an encoded change of key group kg (the Writer copies
// it). Call with wmu held.
func (b *Backend) appendEncoded(kg int, data []byte) {
	if b.closed {
		return
	}
	seq, err := b.w.Append(context.Background(), b.id, kg, data)
	if err != nil {
		b.lost(1)
		return
	}
	b.lastSeq = seq
}

// appendEntries logs encoded changes in order with one Writer call, as
// appendEncoded of each in turn would. Call with wmu held.
func (b *Backend) appendEntries(ents []dstl.Entry) {
	if b.closed || len(ents) == 0 {
		return
	}
	last, n, err := b.w.AppendBatch(context.Background(), b.id, ents)
	if n > 0 {
		b.lastSeq = last
	}
	switch {
	case err == nil:
	case n == 0 && errors.Is(err, dstl.ErrInvalidArgument):
		// One entry the log refuses (a change too big for it) must not
		// cost the others their place in the log: log them one by one.
		for _, e := range ents {
			b.appendEncoded(e.KeyGroup, e.Change)
		}
	default:
		b.lost(uint64(len(ents) - n))
	}
}

// lost records n changes the log refused: the inner backend is ahead of
// the log, so no base taken before may be used again, and the next
// checkpoint materializes a view that has the changes. Call with wmu
// held.
func (b *Backend) lost(n uint64) {
	b.epoch += n
	conf, mat := b.conf, b.mat
	b.conf, b.mat = nil, nil
	for _, m := range []*materialization{conf, mat} {
		if m != nil {
			b.dropBase(m)
		}
	}
}

func one(c *Change) []*Change { return []*Change{c} }

// RegisterState implements backend.Backend.
func (b *Backend) RegisterState(d backend.StateDescriptor) error {
	return b.mutate(func() ([]*Change, error) {
		b.smu.RLock()
		old, had := b.states[d.Name]
		b.smu.RUnlock()
		if err := b.inner.RegisterState(d); err != nil {
			return nil, err
		}
		if had && old == d {
			return nil, nil
		}
		b.smu.Lock()
		b.states[d.Name] = d
		b.smu.Unlock()
		return one(&Change{Op: OpRegister, Desc: d}), nil
	})
}

// Get implements backend.Backend.
func (b *Backend) Get(state string, k backend.Key) (v []byte, ok bool, err error) {
	if !b.refreshes(state) {
		return b.inner.Get(state, k)
	}
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if v, ok, err = b.inner.Get(state, k); err != nil || !ok {
			return nil, err
		}
		return one(&Change{Op: OpGet, State: state, Key: k}), nil
	})
	return v, ok, err
}

// Put implements backend.Backend.
func (b *Backend) Put(state string, k backend.Key, value []byte) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpPut, State: state, Key: k, Values: [][]byte{value}}), b.inner.Put(state, k, value)
	})
}

// Delete implements backend.Backend.
func (b *Backend) Delete(state string, k backend.Key) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpDelete, State: state, Key: k}), b.inner.Delete(state, k)
	})
}

// ListAppend implements backend.Backend.
func (b *Backend) ListAppend(state string, k backend.Key, values ...[]byte) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpListAppend, State: state, Key: k, Values: values}), b.inner.ListAppend(state, k, values...)
	})
}

// ListGet implements backend.Backend.
func (b *Backend) ListGet(state string, k backend.Key) (l [][]byte, err error) {
	if !b.refreshes(state) {
		return b.inner.ListGet(state, k)
	}
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if l, err = b.inner.ListGet(state, k); err != nil || len(l) == 0 {
			return nil, err
		}
		return one(&Change{Op: OpListGet, State: state, Key: k}), nil
	})
	return l, err
}

// MapGet implements backend.Backend.
func (b *Backend) MapGet(state string, k backend.Key, userKey []byte) (v []byte, ok bool, err error) {
	if !b.refreshes(state) {
		return b.inner.MapGet(state, k, userKey)
	}
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if v, ok, err = b.inner.MapGet(state, k, userKey); err != nil || !ok {
			return nil, err
		}
		return one(&Change{Op: OpMapGet, State: state, Key: k, UserKey: userKey}), nil
	})
	return v, ok, err
}

// MapPut implements backend.Backend.
func (b *Backend) MapPut(state string, k backend.Key, userKey, value []byte) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpMapPut, State: state, Key: k, UserKey: userKey, Value: value}), b.inner.MapPut(state, k, userKey, value)
	})
}

// MapRemove implements backend.Backend.
func (b *Backend) MapRemove(state string, k backend.Key, userKey []byte) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpMapRemove, State: state, Key: k, UserKey: userKey}), b.inner.MapRemove(state, k, userKey)
	})
}

// MapContains implements backend.Backend; it never refreshes a TTL.
func (b *Backend) MapContains(state string, k backend.Key, userKey []byte) (bool, error) {
	return b.inner.MapContains(state, k, userKey)
}

// MapIterate implements backend.Backend.
func (b *Backend) MapIterate(state string, k backend.Key, after []byte, limit int) (es []backend.MapEntry, more bool, err error) {
	if !b.refreshes(state) {
		return b.inner.MapIterate(state, k, after, limit)
	}
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if es, more, err = b.inner.MapIterate(state, k, after, limit); err != nil || len(es) == 0 {
			return nil, err
		}
		return one(&Change{Op: OpMapIterate, State: state, Key: k, HasAfter: after != nil, After: after, Limit: int64(limit)}), nil
	})
	return es, more, err
}

// AggregateAdd implements backend.Backend.
func (b *Backend) AggregateAdd(state string, k backend.Key, v backend.Number) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpAggregate, State: state, Key: k, Number: v}), b.inner.AggregateAdd(state, k, v)
	})
}

// AggregateGet implements backend.Backend.
func (b *Backend) AggregateGet(state string, k backend.Key) (n backend.Number, ok bool, err error) {
	if !b.refreshes(state) {
		return b.inner.AggregateGet(state, k)
	}
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if n, ok, err = b.inner.AggregateGet(state, k); err != nil || !ok {
			return nil, err
		}
		return one(&Change{Op: OpAggGet, State: state, Key: k}), nil
	})
	return n, ok, err
}

// RegisterTimer implements backend.Backend.
func (b *Backend) RegisterTimer(state string, t backend.Timer) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpTimerAdd, State: state, Timer: t}), b.inner.RegisterTimer(state, t)
	})
}

// DeleteTimer implements backend.Backend.
func (b *Backend) DeleteTimer(state string, t backend.Timer) error {
	return b.mutate(func() ([]*Change, error) {
		return one(&Change{Op: OpTimerDelete, State: state, Timer: t}), b.inner.DeleteTimer(state, t)
	})
}

// PollTimers implements backend.Backend. Each polled timer is logged as its
// deletion, so a rescaled replay removes exactly its own key groups' timers.
func (b *Backend) PollTimers(state string, watermark int64, limit int) (ts []backend.Timer, err error) {
	err = b.mutate(func() ([]*Change, error) {
		var err error
		if ts, err = b.inner.PollTimers(state, watermark, limit); err != nil {
			return nil, err
		}
		cs := make([]*Change, len(ts))
		for i, t := range ts {
			cs[i] = &Change{Op: OpTimerDelete, State: state, Timer: t}
		}
		return cs, nil
	})
	return ts, err
}

// NotifyCheckpointComplete truncates the log up to the base the completed
// checkpoint used: no later checkpoint needs it.
func (b *Backend) NotifyCheckpointComplete(checkpointID uint64) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	m, ok := b.used[checkpointID]
	for id := range b.used {
		if id <= checkpointID {
			delete(b.used, id)
		}
	}
	if !ok || b.closed {
		return
	}
	if m.epoch == b.epoch && (b.conf == nil || b.conf.seq < m.seq) {
		b.conf = m
		if b.mat != nil && b.mat.seq <= m.seq {
			b.mat = nil
		}
		if m.native {
			b.inner.NotifyCheckpointComplete(uint64(m.n))
		}
	}
	b.confirmed = max(b.confirmed, m.seq)
	b.truncateLocked()
}

// truncateLocked truncates the log up to the newest confirmed base, but
// not past the base of a pending snapshot: a checkpoint snapshotted on an
// older base before a newer one was confirmed still persists its window
// from there. snapshotDone calls it again when such a snapshot ends. Call
// with wmu held.
func (b *Backend) truncateLocked() {
	upto := b.confirmed
	for p := range b.pend {
		upto = min(upto, p.m.seq)
	}
	if upto > b.truncated && !b.closed {
		b.w.Truncate(b.id, upto)
		b.truncated = upto
	}
}

// NotifyCheckpointAborted forgets the checkpoint: it never truncates, and a
// base only it referenced is never used again (the registry may delete
// its files).
func (b *Backend) NotifyCheckpointAborted(checkpointID uint64) {
	b.wmu.Lock()
	m := b.used[checkpointID]
	delete(b.used, checkpointID)
	if m != nil {
		b.dropBase(m)
	}
	b.wmu.Unlock()
}

// CanonicalSnapshot implements backend.CanonicalSnapshotter: a savepoint
// goes straight to the inner backend and neither takes nor consumes a
// materialization (FLINK-40302).
func (b *Backend) CanonicalSnapshot(ctx context.Context, checkpointID uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	return b.canon.CanonicalSnapshot(ctx, checkpointID, store, dir)
}

// Close closes the inner backend and drops the instance's log from the
// writer (dstl.Writer.Forget): its segments go to the refcount registry
// through TakeReleased. Snapshots still pending may run to completion: the
// last of them drops the log.
func (b *Backend) Close() error {
	b.wmu.Lock()
	if b.closed {
		b.wmu.Unlock()
		return nil
	}
	b.closed = true
	forget := len(b.pend) == 0
	b.wmu.Unlock()
	err := b.inner.Close()
	if forget {
		b.w.Forget(b.id)
	}
	return err
}

// Unwrap ends changelog mode after a restore: it drops the instance's log
// from the writer and returns the inner backend, which the caller owns
// from now on (a task restored from changelog checkpoints with changelog
// mode switched off since). Call it before any snapshot; the Backend is
// closed afterwards.
func (b *Backend) Unwrap() (backend.Backend, error) {
	b.wmu.Lock()
	if b.closed || len(b.pend) > 0 {
		b.wmu.Unlock()
		return nil, fmt.Errorf("%w: changelog: unwrap of %s: closed or snapshotting", backend.ErrInvalidArgument, b.opts.Task)
	}
	b.closed = true
	b.wmu.Unlock()
	b.w.Forget(b.id)
	return b.inner, nil
}

// WriterID is the instance's log id in the shared writer.
func (b *Backend) WriterID() string { return b.id }

// Stats is what an instance reports for the daemon's changelog metrics.
type Stats struct {
	// LastSeq is the seq of the last logged change; TruncatedSeq the seq
	// the log was truncated to. LastSeq - TruncatedSeq is the log an
	// instance still holds: it grows without bound when checkpoints keep
	// failing or materializations never get confirmed (FLINK-30863).
	LastSeq, TruncatedSeq uint64
	// ConfirmedBaseSeq is the seq the latest confirmed base covers (0:
	// none yet).
	ConfirmedBaseSeq uint64
	// Materializations counts the bases taken (by Materialize and by
	// checkpoints); LostChanges the changes the log refused.
	Materializations int
	LostChanges      uint64
	// ReplayDuration is the time Open spent replaying logs after the
	// inner backend restored its bases.
	ReplayDuration time.Duration
}

// Stats returns the instance's counters.
func (b *Backend) Stats() Stats {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	s := Stats{LastSeq: b.lastSeq, TruncatedSeq: b.truncated, Materializations: b.matN, LostChanges: b.epoch,
		ReplayDuration: b.replayDur}
	if b.conf != nil {
		s.ConfirmedBaseSeq = b.conf.seq
	}
	return s
}
