package lsm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// Defaults of Options.
const (
	DefaultCacheSize = 32 << 20
	// DefaultMemTableSize holds what a busy task writes between two
	// checkpoints a second apart (about 18 MB in the 1 GiB Flink
	// benchmark), so it flushes once per checkpoint rather than two or
	// three times: each flush is one more level-0 table to compact and to
	// probe on every read. 16 MiB made 1.07-1.10x the records/s of 8 MiB
	// there in alternating runs, 1.15-1.25x on another day (docs/flink.md,
	// "The memtable"); Flink's RocksDB and ForSt use 64 MiB.
	DefaultMemTableSize   = 16 << 20
	DefaultTargetFileSize = 16 << 20
	// DefaultRemoteMemTableSize is the memtable of an instance in remote
	// mode: every flush there is a new object in the store and a table
	// that a restore consults before its first get, so fewer, larger
	// flushes pay (the size Flink's RocksDB and ForSt backends use). A
	// memtable grows to it from 256 KiB, so idle instances do not hold it.
	DefaultRemoteMemTableSize = 64 << 20
	DefaultUploadConcurrency  = 4
	// DefaultMaxManifestFileSize bounds the MANIFEST, a private file that
	// every checkpoint uploads whole; Pebble rewrites it compactly when it
	// grows past this.
	DefaultMaxManifestFileSize = 4 << 20
)

// Level-0 thresholds of every store (see pebbleOptions).
const (
	l0CompactionThreshold = 8
	l0StopWritesThreshold = 20
)

// noTombstoneDenseCompactions switches Pebble's tombstone-density
// compactions off (a value <= 0; see pebbleOptions).
const noTombstoneDenseCompactions = -1

// bloomBitsPerKey is the size of every table's bloom filter: about 1%
// false positives for 1.25 bytes per key.
const bloomBitsPerKey = 10

// Options are the lsm-specific options of Open.
type Options struct {
	// Dir is this instance's local working directory. Required. Open
	// removes the subdirectories it owns there (db, chk, restore) left by an
	// earlier run: local state is never reused (the WAL is off), so the
	// directory must belong to this instance alone.
	Dir string
	// Cache is a block cache shared by several instances (the daemon keeps
	// one for all tasks). Optional; the caller keeps its reference. When
	// nil, the instance makes its own cache of CacheSize bytes.
	Cache *pebble.Cache
	// CacheSize is the size of the instance's own block cache. Default
	// DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the size of one memtable; a snapshot flushes it.
	// Default DefaultMemTableSize.
	MemTableSize uint64
	// TargetFileSize is the target SST size on every level. Larger files
	// mean fewer files per handle but more bytes re-uploaded per
	// compaction. Default DefaultTargetFileSize.
	TargetFileSize int64
	// MaxManifestFileSize: see DefaultMaxManifestFileSize.
	MaxManifestFileSize int64
	// UploadConcurrency is how many files a snapshot uploads, or a restore
	// downloads, at once. Default DefaultUploadConcurrency.
	UploadConcurrency int
	// FS is the local file system. Default vfs.Default; tests pass
	// vfs.NewMem().
	FS vfs.FS
	// HeapSnapshots is the daemon's in-memory store of heap snapshots
	// (heap.Options.Snapshots). Optional: restores from heap handles look
	// there first, then in the restore store (a native savepoint copies
	// heap files there).
	HeapSnapshots tiered.Store
	// DownloadCache is a restore-download cache shared by the instances of
	// the host (the daemon keeps one): restores from the same checkpoint,
	// as the new subtasks of a rescaled job are, download each file once.
	// Optional; it must be on FS.
	DownloadCache *DownloadCache
	// NoGraft makes restores from several lsm handles copy the key groups
	// of the handles other than the base (rewrite them into new SSTs and
	// ingest those) instead of grafting their stores into the base (see
	// graft.go): slower, but it does not depend on Pebble's MANIFEST
	// format. Restores also copy when the self-check at the first graft
	// finds that the Pebble linked in does not read graft's edit back as
	// written (it logs a warning then).
	NoGraft bool
	// Remote, when set, puts the instance's SSTs in an object store from
	// the start, with the local disk as a bounded cache (remote.go). Nil,
	// the default: SSTs on local disk, as always.
	Remote *RemoteOptions
	// Logger receives Pebble's messages. Default: errors go to the standard
	// logger, informational lines are dropped.
	Logger pebble.Logger
	// ObjectPrefix is where a checkpoint's objects go in the store: shared
	// files under ObjectPrefix+"shared/", private ones under
	// ObjectPrefix+"chk-<id>/<task>/" by default and as
	// ObjectPrefix+"chk-<id>/<task>-<name>" when set (an engine's
	// directory holds only files in a checkpoint's directory, see
	// localMode.snapshot). It ends in "/" and is a valid
	// relative object name (backend.ValidatePath). Default "<job>/", the
	// catalog's layout; the daemon's externally owned instances put their
	// files under the root the engine named instead (no catalog knows
	// them). Local mode only: remote mode keeps its SSTs where it made
	// them.
	ObjectPrefix string

	// DisableAutomaticCompactions keeps every SST until a manual
	// compaction: for tests and tools that need an SST to outlive several
	// checkpoints (an incremental snapshot's reuse is only visible then).
	// An instance that takes writes must compact; the daemon never sets it.
	DisableAutomaticCompactions bool
	// noTableStats is for tests that count the store reads of a restore:
	// Pebble loads table statistics (footer and properties of each new
	// table) in the background.
	noTableStats bool
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
		if o.Remote != nil {
			o.MemTableSize = DefaultRemoteMemTableSize
		}
	}
	if o.TargetFileSize == 0 {
		o.TargetFileSize = DefaultTargetFileSize
	}
	if o.MaxManifestFileSize == 0 {
		o.MaxManifestFileSize = DefaultMaxManifestFileSize
	}
	if o.UploadConcurrency == 0 {
		o.UploadConcurrency = DefaultUploadConcurrency
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = quietLogger{}
	}
	if o.Remote != nil {
		o.Remote.ensureDefaults()
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("lsm: %w: "+format, append([]any{backend.ErrInvalidArgument}, args...)...))
	}
	if o.Dir == "" {
		bad("no local directory (Options.Dir)")
	}
	if o.CacheSize < 0 {
		bad("cache size %d is negative", o.CacheSize)
	}
	if o.MemTableSize < 64<<10 || o.MemTableSize > 4<<30 {
		bad("memtable size %d is outside [64 KiB, 4 GiB]", o.MemTableSize)
	}
	if o.TargetFileSize < 64<<10 {
		bad("target file size %d is below 64 KiB", o.TargetFileSize)
	}
	if o.MaxManifestFileSize < 64<<10 {
		bad("max manifest file size %d is below 64 KiB", o.MaxManifestFileSize)
	}
	if o.UploadConcurrency < 1 || o.UploadConcurrency > 256 {
		bad("upload concurrency %d is outside [1, 256]", o.UploadConcurrency)
	}
	if o.DownloadCache != nil && !sameFS(o.DownloadCache.fs, o.FS) {
		bad("the download cache is on another file system than Options.FS")
	}
	if o.Remote != nil {
		o.Remote.validate(bad)
	}
	if o.ObjectPrefix != "" {
		if !strings.HasSuffix(o.ObjectPrefix, "/") {
			bad("object prefix %q does not end in /", o.ObjectPrefix)
		} else if err := backend.ValidatePath(strings.TrimSuffix(o.ObjectPrefix, "/")); err != nil {
			bad("object prefix %q: %v", o.ObjectPrefix, err)
		}
		if o.Remote != nil {
			bad("an object prefix (%q) with remote mode: remote SSTs live where they were made; use local mode", o.ObjectPrefix)
		}
	}
	return errors.Join(errs...)
}

// quietLogger drops Pebble's informational lines (one per flush or
// compaction would drown a daemon's log) and keeps errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf("lsm: pebble: "+format, args...)
}

// Fatalf panics instead of exiting: on the restore path (the only place
// where Pebble reads files it did not write) the panic becomes an error,
// and elsewhere it still stops the process, as Pebble requires.
func (quietLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf("lsm: pebble: "+format, args...)
	pebble.DefaultLogger.Errorf("%s", msg)
	panic(msg)
}
