package lsm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/tiered"
)

// Backend is the Pebble backend of one task instance.
type Backend struct {
	*kvstate.State

	opts backend.Options
	lo   Options
	// diskFS is Options.FS as given; lo.FS wraps it (metaMemFS).
	diskFS vfs.FS
	dbDir  string
	db     *pebble.DB
	// hold is the block cache (own or shared) with the room it was given
	// for this instance's memtables.
	hold cacheHold

	// load serializes bulk loads (view.go): one session at a time.
	load sync.Mutex

	mu sync.Mutex
	// refs counts the users of db: the instance until Close, plus each
	// canonical snapshot that still holds a Pebble snapshot. Pebble closes
	// when it drops to zero, so a snapshot returned before Close can still
	// run to completion (backend.Backend contract).
	refs   int
	closed bool
	seq    uint64
	inc    incremental
	// rstats is written by the restore in Open, read-only afterwards.
	rstats RestoreStats
	// mode is what local and remote mode (Options.Remote) do differently;
	// set in Open before the store is, never changed.
	mode mode
}

// mode is where local mode (SSTs on the local disk, checkpoints upload
// them: local.go) and remote mode (SSTs in the checkpoint store from the
// start, checkpoints hand them over: remote.go) differ. The rest of the
// backend is the same for both and asks its mode.
type mode interface {
	// restore opens b.db from the restore handles and returns the states
	// they recorded; keepHistory: the restored files may be referenced by
	// later checkpoints (claim mode, same store).
	restore(ctx context.Context, keepHistory bool) ([]backend.StateDescriptor, error)
	// start readies a freshly opened, empty b.db.
	start() error
	// pebbleOptions completes the options of the live store.
	pebbleOptions(o *pebble.Options)
	// snapshot and baseSnapshot are Snapshot and BaseSnapshot (dir
	// validated).
	snapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error)
	baseSnapshot(ctx context.Context, id uint64, dir string) (backend.PendingSnapshot, error)
	// load is Load.
	load() (backend.LoadSession, error)
	// checkpointComplete and checkpointAborted hear the notifications
	// before the checkpoint history does.
	checkpointComplete(checkpointID uint64)
	checkpointAborted(checkpointID uint64)
	// holdBase is HoldBase.
	holdBase(ctx context.Context, id, checkpointID uint64) error
	// close closes b.db (nil if Open failed before it) and releases what
	// the mode holds; abandon stops the mode's background work only, as
	// a crash would.
	close() error
	abandon()

	// For tests and metrics: HandOffRetries, RefreshLease, HeldBases and
	// RestoreMarked.
	handOffRetries() int64
	refreshLease(ctx context.Context) error
	heldBases() []uint64
	restoreMarked() bool
}

// incremental is the history that lets checkpoints reference instead of
// upload. Guarded by Backend.mu.
type incremental struct {
	// base maps local SST names to the shared objects the confirmed base
	// holds: the newest confirmed checkpoint of this instance or, until one
	// is confirmed, the handle restored from (claim mode). Never mutated,
	// only replaced, so a running snapshot may keep reading an old one.
	base fileSet
	// completed: a checkpoint of this instance was confirmed; last is its id.
	completed bool
	last      uint64
	// done holds the shared file sets of checkpoints whose upload finished
	// but that are not confirmed yet (placeholders, FLINK-25395).
	done map[uint64]fileSet
	// running counts Runs in flight per checkpoint; aborted marks those
	// aborted meanwhile so their result is never recorded.
	running map[uint64]int
	aborted map[uint64]bool
}

// fileSet maps a local file name to the shared object that holds its bytes.
type fileSet map[string]backend.FileRef

var (
	_ backend.Backend              = (*Backend)(nil)
	_ backend.CanonicalSnapshotter = (*Backend)(nil)
	_ backend.BaseSnapshotter      = (*Backend)(nil)
	_ backend.BaseHolder           = (*Backend)(nil)
	_ backend.Grouper              = (*Backend)(nil)
	_ backend.ReadGrouper          = (*Backend)(nil)
)

// Open starts an instance in lo.Dir: empty, or restored from opts.Restore
// (see the package documentation for how several handles and sub-ranges
// are combined). It is OpenContext without a deadline.
func Open(opts backend.Options, lo Options) (*Backend, error) {
	return OpenContext(context.Background(), opts, lo)
}

// OpenContext is Open whose restore (downloads and copies) stops when ctx
// is done.
func OpenContext(ctx context.Context, opts backend.Options, lo Options) (*Backend, error) {
	// Restored SSTs may be referenced by later checkpoints only if they live
	// in the store those checkpoints are written to and the restore claims
	// them.
	keepHistory := !opts.NoClaim && (opts.RestoreStore == nil || sameStore(opts.RestoreStore, opts.Store))
	opts.EnsureDefaults()
	lo.EnsureDefaults()
	if err := errors.Join(opts.Validate(), lo.Validate()); err != nil {
		return nil, fmt.Errorf("lsm: open %s: %w", opts.Task, err)
	}
	// The store's metadata files live in memory (metafs.go); the backend
	// reaches its directory only through this file system.
	dbDir := lo.FS.PathJoin(lo.Dir, "db")
	diskFS := lo.FS
	// A new, empty instance makes its directories on disk only when it
	// first writes a file there.
	lo.FS = newMetaMemFS(diskFS, dbDir, len(opts.Restore) == 0)
	b := &Backend{opts: opts, lo: lo, diskFS: diskFS, refs: 1}
	b.inc.done = map[uint64]fileSet{}
	b.inc.running = map[uint64]int{}
	b.inc.aborted = map[uint64]bool{}
	fs := lo.FS
	b.dbDir = dbDir
	for _, sub := range []string{"db", "chk", "restore"} {
		if err := fs.RemoveAll(fs.PathJoin(lo.Dir, sub)); err != nil {
			return nil, fmt.Errorf("lsm: open %s: clear %s: %w", opts.Task, fs.PathJoin(lo.Dir, sub), err)
		}
	}
	if err := fs.MkdirAll(lo.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("lsm: open %s: %w", opts.Task, err)
	}
	b.hold = holdCache(lo.Cache, lo.CacheSize, lo.MemTableSize)

	var restored []backend.StateDescriptor
	var err error
	if lo.Remote != nil {
		b.mode, err = newRemoteMode(b)
	} else {
		b.mode = localMode{b}
	}
	if err == nil && len(opts.Restore) > 0 {
		restored, err = b.mode.restore(ctx, keepHistory)
	} else if err == nil {
		b.db, err = openFresh(b.dbDir, b.pebbleOptions(false))
		if err != nil {
			err = fmt.Errorf("lsm: open %s: pebble in %s: %w", opts.Task, b.dbDir, err)
		} else {
			err = b.mode.start()
		}
	}
	if err == nil {
		b.State, err = kvstate.New(engine{b.db}, kvstate.Config{
			Info: backend.Info{Kind: backend.KindLSM, Task: opts.Task, KeyGroups: opts.KeyGroups,
				MaxParallelism: opts.MaxParallelism},
			Clock:        opts.Clock,
			MaxValueSize: opts.MaxValueSize,
			States:       opts.States,
			Restored:     restored,
		})
		if err != nil {
			err = fmt.Errorf("lsm: open %s: %w", opts.Task, err)
		}
	}
	if err != nil {
		if b.mode != nil {
			_ = b.mode.close()
		}
		_ = fs.RemoveAll(b.dbDir)
		_ = fs.RemoveAll(fs.PathJoin(lo.Dir, "restore"))
		b.hold.drop()
		return nil, err
	}
	return b, nil
}

// sameStore reports whether a and b are the same store value (restored
// object names are then valid in the checkpoint store).
func sameStore(a, b tiered.Store) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// pebbleOptions are the options of every Pebble store the instance opens:
// the live one and, read-only, temporary copies of restore handles.
func (b *Backend) pebbleOptions(readOnly bool) *pebble.Options {
	o := &pebble.Options{
		// No store an instance opens is ever reopened after a crash: its
		// directory is cleared at every Open, state survives only in
		// checkpoints (written and synced by the checkpoint store), and
		// the WAL is off. So Pebble's fsyncs protect nothing here, and
		// they were most of an empty instance's open (29 ms of fsyncs of
		// MANIFEST, markers and directories against 5.7 ms without).
		FS:                  noSyncFS{lazyDirFS{b.lo.FS}},
		Cache:               b.hold.cache,
		Merger:              concatMerger,
		DisableWAL:          true,
		MemTableSize:        b.lo.MemTableSize,
		MaxManifestFileSize: b.lo.MaxManifestFileSize,
		FormatMajorVersion:  pebble.FormatNewest,
		ReadOnly:            readOnly,
		Logger:              b.lo.Logger,
		// Pebble's default answer to a corrupt block is Fatalf (the process
		// exits). The read that found it fails with an error anyway, which
		// the caller sees; the daemon must stay up for every other task.
		EventListener: &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
			b.lo.Logger.Errorf("%s: %s", b.opts.Task, info)
		}},

		DisableAutomaticCompactions: b.lo.DisableAutomaticCompactions,
		DisableTableStats:           b.lo.noTableStats,

		// Pebble scores level 0 as twice its sublevels over this
		// threshold, so its default (4) compacts at every second flush, and
		// every snapshot flushes. A compaction of level 0 into the level
		// below rewrites every table its keys overlap, which for changes
		// spread over the key space is the whole level: with the default,
		// every second incremental checkpoint re-uploaded the whole of a
		// small store. 8 compacts at four sublevels, as RocksDB does at its
		// level0_file_num_compaction_trigger of 4 (Flink's setting), and
		// leaves three checkpoints in four small. The stop threshold keeps
		// its distance above it.
		L0CompactionThreshold: l0CompactionThreshold,
		L0StopWritesThreshold: l0StopWritesThreshold,
	}
	// No tombstone-density compactions: Pebble rewrites a table whose
	// blocks are mostly point tombstones even when no level needs a
	// compaction, and an incremental checkpoint re-uploads every table a
	// compaction writes. A timer queue deletes its entries in order as
	// they fire (and reads past them with a seek, StatedQueueSet), so
	// such tables are what it leaves behind: with timers in the daemon,
	// 40% of a Flink job's compaction output was these rewrites, and its
	// checkpoints 1.27x RocksDB's, which has no such compaction unless
	// asked. Tombstones still go as score-based compactions reach them.
	o.Experimental.TombstoneDenseCompactionThreshold = noTombstoneDenseCompactions
	// The same target on every level (RocksDB's multiplier 1, as Flink
	// uses), not Pebble's doubling: files stay small at the bottom too, so
	// a compaction there re-uploads little and the file count stays about
	// FullSize/TargetFileSize.
	for i := range o.TargetFileSizes {
		o.TargetFileSizes[i] = b.lo.TargetFileSize
	}
	// Bloom filters on every level: a table that cannot hold the key
	// costs one small filter block, kept in the block cache, instead of
	// an index and a data block searched. A get of an absent key (a key's
	// first read in a job, and every get a JVM cache cannot answer with
	// its own filter) would search each level; a present key at the
	// bottom, every level above it. On a remote store each such block is
	// a request on a cold cache.
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	if !readOnly {
		b.mode.pebbleOptions(o)
	}
	o.EnsureDefaults()
	return o
}

// DB exposes the Pebble store for tests and tools that need metrics or raw
// access (bench compares against raw Pebble). Callers must not write to it.
func (b *Backend) DB() *pebble.DB { return b.db }

// Close implements backend.Backend. It is idempotent. Snapshots already
// returned stay usable: checkpoint snapshots read their own hard-linked
// copy, canonical ones keep Pebble open until they finish or are released.
func (b *Backend) Close() error {
	if !b.State.Close() {
		return nil
	}
	return b.unref(true)
}

// ref takes a reference on db for a canonical snapshot. Callers hold the
// State exclusively, so the instance is not closed.
func (b *Backend) ref() {
	b.mu.Lock()
	b.refs++
	b.mu.Unlock()
}

// unref drops a reference; the last one closes Pebble and removes the
// local store (it is never reopened: the WAL is off).
func (b *Backend) unref(closing bool) error {
	b.mu.Lock()
	if closing {
		b.closed = true
	}
	b.refs--
	last := b.refs == 0
	b.mu.Unlock()
	if !last {
		return nil
	}
	err := b.mode.close()
	b.hold.drop()
	if rerr := b.lo.FS.RemoveAll(b.dbDir); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("lsm: close %s: %w", b.opts.Task, err)
	}
	return nil
}

// NotifyCheckpointComplete implements backend.Backend: the shared files of
// checkpointID become the base later checkpoints reference, unless a newer
// checkpoint was confirmed already.
func (b *Backend) NotifyCheckpointComplete(checkpointID uint64) {
	b.mode.checkpointComplete(checkpointID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if set, ok := b.inc.done[checkpointID]; ok && (!b.inc.completed || checkpointID > b.inc.last) {
		b.inc.base = set
		b.inc.completed = true
		b.inc.last = checkpointID
	}
	// Older placeholders can never become the base any more.
	for id := range b.inc.done {
		if id <= checkpointID {
			delete(b.inc.done, id)
		}
	}
}

// NotifyCheckpointAborted implements backend.Backend: what checkpointID
// uploaded is forgotten. Nothing is deleted here; the registry's sweep
// removes shared files that nothing retained refers to (FLINK-24611).
func (b *Backend) NotifyCheckpointAborted(checkpointID uint64) {
	b.mode.checkpointAborted(checkpointID)
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inc.done, checkpointID)
	if b.inc.running[checkpointID] > 0 {
		b.inc.aborted[checkpointID] = true
	}
}

// Abandon stops the instance as a crash of the daemon would: Pebble is
// closed and the local directory removed, but nothing in the store is
// released (markers, lease and objects stay for the catalog's sweep). For
// crash tests. The instance is closed afterwards.
func (b *Backend) Abandon() error {
	if !b.State.Close() {
		return nil
	}
	b.mode.abandon()
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	err := b.db.Close()
	b.hold.drop()
	return errors.Join(err, b.lo.FS.RemoveAll(b.dbDir))
}

// HoldBase implements backend.BaseHolder: every checkpoint that references
// changelog base id holds the base's objects itself (remotebase.go). In
// local mode a base's files are the registry's alone and it does nothing.
func (b *Backend) HoldBase(ctx context.Context, id, checkpointID uint64) error {
	return b.mode.holdBase(ctx, id, checkpointID)
}

// HandOffRetries is the number of hand-off snapshots whose version changed
// between the listings around its pin (retried), or whose holder check
// failed (declined); 0 in local mode.
func (b *Backend) HandOffRetries() int64 { return b.mode.handOffRetries() }

// RefreshLease rewrites the instance's lease now, as its timer does every
// RemoteOptions.LeaseInterval (a no-op in local mode). For tests that move
// the catalog's clock past the grace period.
func (b *Backend) RefreshLease(ctx context.Context) error { return b.mode.refreshLease(ctx) }

// HeldBases lists the changelog bases the instance holds with its base
// markers (none in local mode), for tests.
func (b *Backend) HeldBases() []uint64 { return b.mode.heldBases() }

// RestoreMarked reports whether a claimed restore's instance markers are
// all written and its holds removed (true in local mode and without a
// claimed restore).
func (b *Backend) RestoreMarked() bool { return b.mode.restoreMarked() }
