package openers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered/memstore"
)

// Config are the daemon-wide options of the backends.
type Config struct {
	// HeapSnapshots is the one in-memory store of every heap snapshot of
	// the daemon. Default: a new memstore.
	HeapSnapshots *memstore.Store
	// HeapSnapshotCap is the largest heap snapshot kept; larger ones are
	// declined. Default heap.DefaultMaxSnapshotSize.
	HeapSnapshotCap int64
	// FileCompression compresses file-backend snapshots: "" or "zstd".
	FileCompression string
	// LSMCacheSize is the size of the one block cache all lsm instances
	// share. Default DefaultLSMCacheSize.
	LSMCacheSize int64
	// LSMRemote puts the SSTs of every lsm instance in the checkpoint
	// store from the start (lsm.Options.Remote over the instance's
	// checkpoint store; docs/lsm-remote.md): checkpoints hand SSTs over
	// instead of uploading them, restores reference them in place.
	// Default false.
	LSMRemote bool
	// LSMRemoteCacheBytes bounds each remote-mode instance's local cache
	// of remote blocks (lsm.RemoteOptions.CacheBytes). Default
	// DefaultLSMRemoteCacheBytes.
	LSMRemoteCacheBytes int64
	// LSMMemTableBytes is every lsm instance's memtable size
	// (lsm.Options.MemTableSize). Default 0: lsm's default for the
	// instance's mode.
	LSMMemTableBytes int64
	// LSMLeaseInterval is how often a remote-mode instance rewrites its
	// lease (lsm.RemoteOptions.LeaseInterval); it must stay well below the
	// catalog's grace period, past which the sweep takes the markers of an
	// instance with a stale lease for a crashed one's. Default
	// lsm.DefaultLeaseInterval.
	LSMLeaseInterval time.Duration
	// LSMDownloadCacheSize bounds the restore-download cache the lsm
	// instances of a data directory share (lsm.DownloadCache, in
	// LSMDownloadCacheDir under the daemon's data dir): the new subtasks of
	// a rescaled job then download each file of the old checkpoint once.
	// Default lsm.DefaultDownloadCacheSize; negative: no cache.
	LSMDownloadCacheSize int64
	// Logger receives Pebble's messages (PebbleLogger): errors at level
	// error, its informational lines (one per flush or compaction) at
	// level debug. Default: lsm's own (errors to the standard logger,
	// informational lines dropped).
	Logger *slog.Logger
}

// DefaultLSMCacheSize is the default size of the shared lsm block cache.
const DefaultLSMCacheSize = 128 << 20

// DefaultLSMRemoteCacheBytes is Config.LSMRemoteCacheBytes's default.
const DefaultLSMRemoteCacheBytes = lsm.DefaultRemoteCacheBytes

// LSMDownloadCacheDir is the directory under the daemon's data dir that
// holds the lsm restore-download cache. It is emptied when the cache opens
// (at the first lsm open of the process) and when the Set closes.
const LSMDownloadCacheDir = "lsm-download-cache"

// Set is the openers plus the resources they share; Close releases those.
type Set struct {
	Openers       map[backend.Kind]daemon.Opener
	HeapSnapshots *memstore.Store
	closers       []func() error

	// mu guards lsmCache against Close while a metrics scrape reads it.
	mu       sync.Mutex
	lsmCache *pebble.Cache // nil once closed
}

// BlockCacheStats are the shared lsm block cache's figures.
type BlockCacheStats struct {
	// Bytes and Blocks are what the cache holds now.
	Bytes, Blocks int64
	// Hits and Misses count the block reads it answered and those that
	// went to a file, since the start.
	Hits, Misses int64
}

// LSMBlockCache reports the shared lsm block cache's figures (zero after
// Close). An lsm instance's reads of index, filter and data blocks go
// through it; a hit ratio falling toward zero means --lsm-cache-size is
// too small for the state being read.
func (s *Set) LSMBlockCache() BlockCacheStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lsmCache == nil {
		return BlockCacheStats{}
	}
	m := s.lsmCache.Metrics()
	return BlockCacheStats{Bytes: m.Size, Blocks: m.Count, Hits: m.Hits, Misses: m.Misses}
}

// Close releases the shared resources; call it after the daemon's
// Shutdown.
func (s *Set) Close() error {
	s.mu.Lock()
	s.lsmCache = nil
	s.mu.Unlock()
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// New returns the openers of every backend kind.
func New(cfg Config) (*Set, error) {
	if cfg.HeapSnapshots == nil {
		cfg.HeapSnapshots = memstore.New()
	}
	if cfg.HeapSnapshotCap < 0 {
		return nil, fmt.Errorf("openers: heap snapshot cap %d is negative", cfg.HeapSnapshotCap)
	}
	if cfg.LSMCacheSize < 0 {
		return nil, fmt.Errorf("openers: lsm cache size %d is negative", cfg.LSMCacheSize)
	}
	if cfg.LSMCacheSize == 0 {
		cfg.LSMCacheSize = DefaultLSMCacheSize
	}
	if cfg.LSMRemoteCacheBytes < 0 {
		return nil, fmt.Errorf("openers: lsm remote cache size %d is negative", cfg.LSMRemoteCacheBytes)
	}
	if cfg.LSMRemoteCacheBytes == 0 {
		cfg.LSMRemoteCacheBytes = DefaultLSMRemoteCacheBytes
	}
	if cfg.LSMMemTableBytes < 0 {
		return nil, fmt.Errorf("openers: lsm memtable size %d is negative", cfg.LSMMemTableBytes)
	}
	s := &Set{HeapSnapshots: cfg.HeapSnapshots, Openers: map[backend.Kind]daemon.Opener{}}
	s.Openers[backend.KindHeap] = func(_ context.Context, opts backend.Options, _ daemon.OpenEnv) (backend.Backend, error) {
		return heap.Open(opts, heap.Options{Snapshots: cfg.HeapSnapshots, MaxSnapshotSize: cfg.HeapSnapshotCap})
	}
	s.Openers[backend.KindFile] = func(_ context.Context, opts backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
		return file.Open(opts, file.Options{Compression: cfg.FileCompression, TempDir: env.Dir})
	}
	var pl pebble.Logger // nil: lsm's default
	if cfg.Logger != nil {
		pl = PebbleLogger(cfg.Logger)
	}
	cache := pebble.NewCache(cfg.LSMCacheSize)
	s.lsmCache = cache
	s.closers = append(s.closers, func() error { cache.Unref(); return nil })
	if cfg.LSMDownloadCacheSize == 0 {
		cfg.LSMDownloadCacheSize = lsm.DefaultDownloadCacheSize
	}
	dl := &downloadCaches{size: cfg.LSMDownloadCacheSize, byDir: map[string]*lsm.DownloadCache{}}
	s.closers = append(s.closers, dl.close)
	s.Openers[backend.KindLSM] = func(_ context.Context, opts backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
		dc, err := dl.get(env.DataDir)
		if err != nil {
			return nil, err
		}
		lo := lsm.Options{Dir: env.Dir, Cache: cache, HeapSnapshots: cfg.HeapSnapshots, DownloadCache: dc, Logger: pl,
			MemTableSize: uint64(cfg.LSMMemTableBytes), ObjectPrefix: env.ObjectPrefix}
		// A checkpoint restores in the mode that wrote it (canonical
		// ones in either): an instance that does not choose follows it,
		// and one that chooses the other mode is refused, naming why.
		remote := cfg.LSMRemote
		byRemote, byLocal := lsm.RestoreModes(opts.Restore)
		switch env.LSM {
		case daemon.LSMLocal:
			if byRemote {
				return nil, fmt.Errorf("%w: an lsm instance opened in local mode cannot restore this checkpoint: its SSTs live in the checkpoint store (written in remote mode); open it in remote mode, or without a choice",
					backend.ErrInvalidArgument)
			}
			remote = false
		case daemon.LSMRemote:
			if byLocal {
				return nil, fmt.Errorf("%w: an lsm instance opened in remote mode cannot restore this checkpoint: it was written in local mode; open it in local mode, or without a choice, or restore from a canonical savepoint",
					backend.ErrInvalidArgument)
			}
			remote = true
		default:
			if byRemote != byLocal {
				remote = byRemote
			}
		}
		if remote {
			lo.Remote = &lsm.RemoteOptions{Store: opts.Store, CacheBytes: cfg.LSMRemoteCacheBytes, LeaseInterval: cfg.LSMLeaseInterval}
		}
		return lsm.Open(opts, lo)
	}
	return s, nil
}

// downloadCaches opens one lsm.DownloadCache per data directory, at the
// first lsm open there.
type downloadCaches struct {
	size  int64
	mu    sync.Mutex
	byDir map[string]*lsm.DownloadCache
}

func (d *downloadCaches) get(dataDir string) (*lsm.DownloadCache, error) {
	if dataDir == "" || d.size < 0 {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.byDir[dataDir]; ok {
		return c, nil
	}
	c, err := lsm.OpenDownloadCache(nil, filepath.Join(dataDir, LSMDownloadCacheDir), d.size)
	if err != nil {
		return nil, fmt.Errorf("openers: %w", err)
	}
	d.byDir[dataDir] = c
	return c, nil
}

func (d *downloadCaches) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for dir, c := range d.byDir {
		errs = append(errs, c.Close(), os.RemoveAll(filepath.Join(dir, LSMDownloadCacheDir)))
	}
	d.byDir = map[string]*lsm.DownloadCache{}
	return errors.Join(errs...)
}
