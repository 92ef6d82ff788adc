package inspect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// ErrUnsupported is returned for a task handle this build cannot read
// offline; the message names the task and what to do instead.
var ErrUnsupported = errors.New("not readable offline")

// maxManifestSize bounds the manifest a reader loads.
const maxManifestSize = 256 << 20

// remoteCacheBytes bounds the on-disk cache of remote blocks while a
// remote-mode task is read.
const remoteCacheBytes = 32 << 20

// DefaultCacheBytes is the block cache of the lsm instance a task is
// restored into when Options.CacheBytes is 0.
const DefaultCacheBytes = 8 << 20

// Options say what a Reader reads and where it works.
type Options struct {
	// Store is the checkpoint store (its root), or, for a savepoint that
	// was moved elsewhere, a store rooted at the savepoint's directory.
	// Required; never written to; the caller closes it.
	Store tiered.Store
	// LogStore holds the changelog's segments, when the daemon ran with a
	// separate changelog store (--changelog-store). Default Store. Never
	// written to.
	LogStore tiered.Store
	// Dir is the checkpoint or savepoint directory in Store:
	// "<job>/chk-<N>", "savepoints/<id>", or "" for a savepoint at the
	// store's root.
	Dir string
	// TempDir is where a task's state is restored while it is read (one
	// task at a time, deleted after). Default os.TempDir().
	TempDir string
	// CacheBytes is the block cache of that restore. Default
	// DefaultCacheBytes; it must not be negative.
	CacheBytes int64
	// Clock gives the time entries with a TTL are checked against.
	// Default time.Now.
	Clock func() time.Time
	// IncludeExpired also returns entries past their TTL (which a restore
	// would never serve); Entry.Expiry tells them apart.
	IncludeExpired bool
	// HeapSnapshots is the daemon's in-memory store of heap snapshots
	// (daemon.Config.HeapSnapshots), where the files of a heap checkpoint
	// live: set by a reader running inside the daemon, nil offline, where
	// heap checkpoints cannot be read. Never written to.
	HeapSnapshots tiered.Store
}

func (o *Options) ensureDefaults() {
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.LogStore == nil {
		o.LogStore = o.Store
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, fmt.Errorf("inspect: %w: no store", backend.ErrInvalidArgument))
	}
	if o.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("inspect: %w: cache bytes %d is negative", backend.ErrInvalidArgument, o.CacheBytes))
	}
	if o.Dir != "" {
		if err := backend.ValidatePath(o.Dir); err != nil {
			errs = append(errs, fmt.Errorf("inspect: directory %q: %w", o.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// Reader reads the keyed state of one checkpoint or savepoint. It holds
// the manifest only; Scan restores one task at a time.
type Reader struct {
	opts  Options
	m     *catalog.Manifest
	files tiered.Store // where the handles' file paths are resolved
}

// Open reads the manifest of the checkpoint or savepoint in opts.Dir. A
// missing manifest is an error wrapping catalog.ErrNotFound that names
// it; a damaged one wraps catalog.ErrCorrupt.
func Open(ctx context.Context, opts Options) (*Reader, error) {
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	name := catalog.ManifestName
	if opts.Dir != "" {
		name = opts.Dir + "/" + name
	}
	data, err := tiered.ReadAll(ctx, opts.Store, name, maxManifestSize)
	if tiered.IsNotFound(err) {
		return nil, fmt.Errorf("inspect: %w: no manifest %s: %v", catalog.ErrNotFound, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: read manifest %s: %w", name, err)
	}
	m, err := catalog.DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("inspect: manifest %s: %w", name, err)
	}
	files := tiered.Store(readOnly{opts.Store})
	if m.Kind == catalog.KindSavepoint && opts.Dir != "" {
		// A savepoint's paths are relative to its directory.
		files = readOnly{tiered.WithPrefix(opts.Store, opts.Dir)}
	}
	// Packed files (backend.FileRef.Pack) are read from their packs.
	files = backend.PackedStore(files, m.Tasks)
	return &Reader{opts: opts, m: m, files: files}, nil
}

// Manifest is the manifest read by Open. The caller must not change it.
func (r *Reader) Manifest() *catalog.Manifest { return r.m }

// What names the checkpoint or savepoint for messages.
func (r *Reader) What() string {
	if r.m.Kind == catalog.KindSavepoint {
		return fmt.Sprintf("%s savepoint %s of job %s", r.m.Format, r.m.SavepointID, r.m.Job)
	}
	return fmt.Sprintf("checkpoint %d of job %s", r.m.CheckpointID, r.m.Job)
}

// Filter selects entries; the zero Filter selects every entry.
type Filter struct {
	// Operator, when set, selects one operator.
	Operator string
	// Subtask, when set, selects one subtask.
	Subtask *int
	// State, when set, selects one state.
	State string
	// KeyGroups, when set, selects a key-group range: only the tasks that
	// hold some of it are restored, and only that part of them.
	KeyGroups *backend.KeyGroupRange
	// Key, when set, selects one key exactly; KeyPrefix the keys that
	// start with it.
	Key       []byte
	KeyPrefix []byte
}

// MatchAll is the Filter that selects every entry.
func MatchAll() Filter { return Filter{} }

// MatchTask reports whether f selects any of h's entries by its task and
// key groups.
func (f *Filter) MatchTask(h *backend.Handle) bool {
	return (f.Operator == "" || h.Task.Operator == f.Operator) &&
		(f.Subtask == nil || h.Task.Subtask == *f.Subtask) &&
		(f.KeyGroups == nil || !h.KeyGroups.Intersect(*f.KeyGroups).Empty())
}

func (f *Filter) matchKey(k []byte) bool {
	if f.Key != nil && !bytes.Equal(k, f.Key) {
		return false
	}
	return bytes.HasPrefix(k, f.KeyPrefix)
}

// Entry is one entry of keyed state: a value, one element of a list, one
// user key of a map, an aggregate, or a timer. Its byte slices are valid
// only until the function Scan called returns.
type Entry struct {
	Operator string
	Subtask  int
	State    string
	Kind     backend.StateKind
	KeyGroup int
	// Key and Namespace address the entry (a timer's too).
	Key       []byte
	Namespace []byte
	// UserKey is a map entry's user key; nil for other kinds.
	UserKey []byte
	// Value is a value state's value, a list element or a map value; nil
	// for aggregates and timers.
	Value []byte
	// Index is a list element's position in its list (0 for other kinds).
	Index int
	// Number is an aggregate's value (zero for other kinds).
	Number backend.Number
	// Timestamp is a timer's time (0 for other kinds).
	Timestamp int64
	// Expiry is when the entry's TTL ends, unix milliseconds (0: never).
	Expiry int64
	// StoredBytes are the bytes of the stored key and value the entry came
	// from. The elements of one list share one stored value: its bytes are
	// counted on the first element returned and are 0 on the others.
	StoredBytes int
}

// Scan calls fn for every entry f selects, task by task in the manifest's
// order, and within a task in stored order (key group, state, key,
// namespace; a map's user keys in bytewise order; a list's elements in
// append order; timers by time). It stops at fn's first error and
// returns it. A task it cannot read offline fails with an error wrapping
// ErrUnsupported; damage fails with backend.ErrCorrupt naming the file.
func (r *Reader) Scan(ctx context.Context, f Filter, fn func(*Entry) error) error {
	for _, h := range r.m.Tasks {
		if !f.MatchTask(h) {
			continue
		}
		if err := r.scanTask(ctx, h, f, fn); err != nil {
			return err
		}
	}
	return nil
}

// Readable reports why a task cannot be read (nil: it can).
func (r *Reader) Readable(ctx context.Context, h *backend.Handle) error {
	if h.Backend == backend.KindHeap && len(h.Files) > 0 && r.m.Kind == catalog.KindCheckpoint {
		where := r.files
		if r.opts.HeapSnapshots != nil {
			where = r.opts.HeapSnapshots
		}
		if _, err := where.Stat(ctx, h.Files[0].Path); tiered.IsNotFound(err) {
			if r.opts.HeapSnapshots != nil {
				return fmt.Errorf("inspect: %s of %s: %w: its heap snapshot %s is no longer in the daemon's memory (the daemon restarted since, or the checkpoint was discarded)",
					h.Task, r.What(), backend.ErrNotFound, h.Files[0].Path)
			}
			return fmt.Errorf("inspect: %s of %s: %w: a heap checkpoint's files live in the daemon's memory, not in the store (%s is not there); read it through the daemon (its HTTP state API), or take a savepoint (stated savepoint trigger) and read that",
				h.Task, r.What(), ErrUnsupported, h.Files[0].Path)
		}
	}
	return nil
}

// isRemote reports whether h references SSTs in place (lsm remote mode).
func isRemote(h *backend.Handle) bool {
	for _, f := range h.Files {
		if f.Table != nil {
			return true
		}
	}
	return false
}

func (r *Reader) scanTask(ctx context.Context, h *backend.Handle, f Filter, fn func(*Entry) error) (err error) {
	if err := r.Readable(ctx, h); err != nil {
		return err
	}
	kgs := h.KeyGroups
	if f.KeyGroups != nil {
		kgs = kgs.Intersect(*f.KeyGroups)
	}
	states := make(map[string]backend.StateDescriptor, len(h.States))
	for _, d := range h.States {
		states[d.Name] = d
	}
	if f.State != "" {
		if _, ok := states[f.State]; !ok {
			return nil // this task never registered the state
		}
	}
	dir, err := os.MkdirTemp(r.opts.TempDir, "stated-inspect-")
	if err != nil {
		return fmt.Errorf("inspect: temporary directory for %s: %w", h.Task, err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = fmt.Errorf("inspect: remove %s: %w", dir, rerr)
		}
	}()
	db, closeDB, err := r.restore(ctx, h, kgs, dir)
	if err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	defer closeDB()
	lo, hi := kvlayout.KeyGroupSpan(kgs)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	defer it.Close()
	now := r.opts.Clock().UnixMilli()
	d := decoder{r: r, h: h, f: &f, states: states, now: now, fn: fn}
	for it.First(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
		}
		if err := d.entry(it.Key(), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	return nil
}

// restore restores key groups kgs of h into an lsm instance in dir and
// returns its Pebble store. A changelog handle is restored as the daemon
// restores it: its base into the lsm instance, then its log window
// replayed on top, through the changelog wrapper; the writer it needs
// never writes (the replay appends nothing, and its log store is
// read-only).
func (r *Reader) restore(ctx context.Context, h *backend.Handle, kgs backend.KeyGroupRange, dir string) (*pebble.DB, func(), error) {
	opts := backend.Options{
		Task:           h.Task,
		KeyGroups:      kgs,
		MaxParallelism: h.MaxParallelism,
		Store:          r.files,
		Restore:        []*backend.Handle{h},
		RestoreStore:   r.files,
		NoClaim:        true,
		Clock:          r.opts.Clock,
	}
	lo := lsm.Options{Dir: dir, CacheSize: r.opts.CacheBytes, MemTableSize: 1 << 20,
		UploadConcurrency: 2, DisableAutomaticCompactions: true, HeapSnapshots: r.opts.HeapSnapshots}
	var own tiered.Store
	if isRemote(h) {
		// lsm remote mode: the instance ingests the handle's SSTs by
		// reference, reading their blocks from the store. Unclaimed (no
		// holds, no markers written where they live), every table read
		// whole and checked before anything is returned (VerifyRestore),
		// and the instance's own objects (its lease; it flushes nothing)
		// go to a throwaway store in dir, never to the checkpoint store.
		spool := filepath.Join(dir, "spool")
		if err := os.MkdirAll(spool, 0o755); err != nil {
			return nil, nil, err
		}
		var err error
		if own, err = localfs.Open(filepath.Join(dir, "own")); err != nil {
			return nil, nil, err
		}
		lo.Dir = filepath.Join(dir, "lsm")
		lo.Remote = &lsm.RemoteOptions{Store: own, CacheBytes: remoteCacheBytes,
			SpoolDir: spool, VerifyRestore: true}
	}
	closeOwn := func() {
		if own != nil {
			_ = own.Close()
		}
	}
	if !h.IsChangelog() {
		b, err := lsm.OpenContext(ctx, opts, lo)
		if err != nil {
			closeOwn()
			return nil, nil, err
		}
		return b.DB(), func() { _ = b.Close(); closeOwn() }, nil
	}
	ls := dstl.TieredLogStore{Store: readOnly{r.opts.LogStore}}
	w, err := dstl.NewWriter(ls, dstl.Options{})
	if err != nil {
		closeOwn()
		return nil, nil, err
	}
	var inner *lsm.Backend
	cb, err := changelog.Open(opts, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) {
			b, err := lsm.OpenContext(ctx, o, lo)
			if err != nil {
				return nil, err
			}
			inner = b
			return b, nil
		},
		Writer: w,
		Log:    ls,
	})
	if err != nil {
		_ = w.Close()
		closeOwn()
		return nil, nil, err
	}
	return inner.DB(), func() {
		_ = cb.Close()
		_ = w.Close()
		closeOwn()
	}, nil
}

// decoder turns stored entries of one task into Entries.
type decoder struct {
	r      *Reader
	h      *backend.Handle
	f      *Filter
	states map[string]backend.StateDescriptor
	now    int64
	fn     func(*Entry) error
	e      Entry
}

func (d *decoder) corrupt(k []byte, format string, args ...any) error {
	return fmt.Errorf("inspect: %s of %s: %w: stored key %x: %s", d.h.Task, d.r.What(), backend.ErrCorrupt, k, fmt.Sprintf(format, args...))
}

func (d *decoder) expired(expiry int64) bool {
	return !d.r.opts.IncludeExpired && expiry != 0 && expiry <= d.now
}

func (d *decoder) entry(k, v []byte) error {
	dk, err := kvlayout.SplitKey(k)
	if err != nil {
		return d.corrupt(k, "%v", err)
	}
	kg, name, rest := dk.KeyGroup, dk.State, dk.Rest
	if d.f.State != "" && name != d.f.State {
		return nil
	}
	desc, ok := d.states[name]
	if !ok {
		return d.corrupt(k, "state %q is not among the handle's states", name)
	}
	e := &d.e
	*e = Entry{Operator: d.h.Task.Operator, Subtask: d.h.Task.Subtask, State: name, Kind: desc.Kind,
		KeyGroup: kg, StoredBytes: len(k) + len(v)}
	if desc.Kind == backend.KindTimers {
		ts, key, ns, ok := kvlayout.SplitTimer(rest)
		if !ok {
			return d.corrupt(k, "bad timer key")
		}
		if !d.f.matchKey(key) {
			return nil
		}
		e.Key, e.Namespace, e.Timestamp = key, ns, ts
		return d.fn(e)
	}
	key, ns, tail, ok := kvlayout.SplitAddress(rest)
	if !ok {
		return d.corrupt(k, "bad key or namespace")
	}
	if !d.f.matchKey(key) {
		return nil
	}
	e.Key, e.Namespace = key, ns
	switch desc.Kind {
	case backend.KindValue, backend.KindAggregate, backend.KindMap:
		if desc.Kind == backend.KindMap {
			e.UserKey = tail
		} else if len(tail) != 0 {
			return d.corrupt(k, "%d bytes after the namespace of a %s entry", len(tail), desc.Kind)
		}
		expiry, payload, err := kvlayout.DecodeValue(v)
		if err != nil {
			return d.corrupt(k, "%v", err)
		}
		if d.expired(expiry) {
			return nil
		}
		e.Expiry = expiry
		if desc.Kind == backend.KindAggregate {
			if e.Number, err = kvlayout.DecodeNumber(desc.Number, payload); err != nil {
				return d.corrupt(k, "%v", err)
			}
		} else {
			e.Value = payload
		}
		return d.fn(e)
	case backend.KindList:
		if len(tail) != 0 {
			return d.corrupt(k, "%d bytes after the namespace of a list entry", len(tail))
		}
		elems, err := kvlayout.DecodeList(v)
		if err != nil {
			return d.corrupt(k, "%v", err)
		}
		size, i := e.StoredBytes, 0
		for _, el := range elems {
			if d.expired(el.Expiry) {
				continue
			}
			e.Index, e.Value, e.Expiry, e.StoredBytes = i, el.Payload, el.Expiry, size
			size = 0
			i++
			if err := d.fn(e); err != nil {
				return err
			}
		}
		return nil
	}
	return d.corrupt(k, "state %q has unknown kind %s", name, desc.Kind)
}
