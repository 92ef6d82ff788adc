package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// ErrKeyNotFound is Get's error for a key never set. Its text is the one
// hashicorp/raft compares errors with ("not found"), as its own stores do.
var ErrKeyNotFound = errors.New("not found")

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("raftlog: store closed")

// ErrCorrupt is wrapped by every *CorruptError.
var ErrCorrupt = errors.New("raftlog: corrupt record")

// ErrFormatVersion is wrapped when the store's format version is one this
// code does not know (written by a newer stated).
var ErrFormatVersion = errors.New("raftlog: unknown format version")

// CorruptError is a record that cannot be read as written: a log entry
// (Key empty, Index its index) or a stable value (Key its key).
type CorruptError struct {
	Dir    string
	Index  uint64
	Key    string
	Reason string
}

func (e *CorruptError) Error() string {
	what := fmt.Sprintf("log entry %d", e.Index)
	if e.Key != "" {
		what = fmt.Sprintf("stable value %q", e.Key)
	}
	return fmt.Sprintf("raftlog: %s in %s is corrupt: %s (the node cannot use this raft log: "+
		"remove the node from the cluster, move its raft dir aside and join it again to copy the log from the others)",
		what, e.Dir, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Options configure a Store.
type Options struct {
	// FS is the file system the store lives on. Default vfs.Default (the
	// operating system's); tests use vfs.NewCrashableMem.
	FS vfs.FS
	// Logger receives Pebble's messages: informational ones at debug
	// level, errors at error level. Default: discard.
	Logger *slog.Logger
	// CacheSize is Pebble's block cache. Default 8 MiB: raft reads back
	// mostly what it just wrote, from the memtable.
	CacheSize int64
}

// EnsureDefaults fills zero fields.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheSize == 0 {
		o.CacheSize = 8 << 20
	}
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	if o.CacheSize < 0 {
		return fmt.Errorf("raftlog: cache size %d is negative", o.CacheSize)
	}
	return nil
}

// Store is a raft log and stable store in one Pebble database (doc.go).
type Store struct {
	dir string
	// mu guards db against Close: Pebble panics on a closed database,
	// and raft's goroutines may still call in while the node shuts down.
	mu     sync.RWMutex
	db     *pebble.DB
	closed bool
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens the store in dir, creating it if it does not exist.
func Open(dir string, opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := mkdirSynced(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("raftlog: create %s: %w", dir, err)
	}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                 opts.FS,
		Cache:              cache,
		Logger:             pebbleLogger{opts.Logger},
		FormatMajorVersion: pebble.FormatNewest,
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", dir, err)
	}
	s := &Store{dir: dir, db: db}
	if err := s.checkVersion(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// mkdirSynced creates dir and any missing parents, syncing each new
// directory's entry in its parent: Pebble syncs what it writes inside
// dir, but a power loss that drops dir's own entry would lose the store
// whole (TestCrashAtRandomPoints found it).
func mkdirSynced(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	parent := fs.PathDir(dir)
	if parent != dir {
		if err := mkdirSynced(fs, parent); err != nil {
			return err
		}
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d, err := fs.OpenDir(parent)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkVersion reads the format version, writing it in a new store.
func (s *Store) checkVersion() error {
	v, closer, err := s.db.Get(versionKey)
	if errors.Is(err, pebble.ErrNotFound) {
		it, err := s.db.NewIter(nil)
		if err != nil {
			return fmt.Errorf("raftlog: %s: %w", s.dir, err)
		}
		empty := !it.First()
		if err := it.Close(); err != nil {
			return fmt.Errorf("raftlog: %s: %w", s.dir, err)
		}
		if !empty {
			return &CorruptError{Dir: s.dir, Key: "format version", Reason: "records without a format version"}
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], FormatVersion)
		if err := s.db.Set(versionKey, b[:], pebble.Sync); err != nil {
			return fmt.Errorf("raftlog: %s: write the format version: %w", s.dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftlog: %s: read the format version: %w", s.dir, err)
	}
	defer closer.Close()
	if len(v) != 4 {
		return &CorruptError{Dir: s.dir, Key: "format version", Reason: fmt.Sprintf("%d bytes, want 4", len(v))}
	}
	if got := binary.BigEndian.Uint32(v); got != FormatVersion {
		return fmt.Errorf("%w: %s holds format version %d, this stated reads version %d (use the stated that wrote it)",
			ErrFormatVersion, s.dir, got, FormatVersion)
	}
	return nil
}

// Dir is the directory Open was given.
func (s *Store) Dir() string { return s.dir }

// Close closes the database; it is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftlog: close %s: %w", s.dir, err)
	}
	return nil
}

// use runs f with the database unless the store is closed.
func (s *Store) use(f func(db *pebble.DB) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return f(s.db)
}

func (s *Store) wrap(what string, err error) error {
	var ce *CorruptError
	if err == nil || errors.Is(err, ErrClosed) || errors.As(err, &ce) {
		if ce != nil && ce.Dir == "" {
			ce.Dir = s.dir
		}
		return err
	}
	return fmt.Errorf("raftlog: %s in %s: %w", what, s.dir, err)
}

// edge returns the smallest (first) or largest log index, 0 for none.
func (s *Store) edge(first bool) (uint64, error) {
	var idx uint64
	err := s.use(func(db *pebble.DB) error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
		if err != nil {
			return err
		}
		ok := false
		if first {
			ok = it.First()
		} else {
			ok = it.Last()
		}
		if ok {
			var valid bool
			if idx, valid = logKeyIndex(it.Key()); !valid {
				_ = it.Close()
				return &CorruptError{Key: fmt.Sprintf("%x", it.Key()), Reason: "a log key of the wrong length"}
			}
		}
		return it.Close()
	})
	return idx, s.wrap("find the log's bounds", err)
}

// FirstIndex is the smallest index in the log, 0 when it is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.edge(true) }

// LastIndex is the largest index in the log, 0 when it is empty.
func (s *Store) LastIndex() (uint64, error) { return s.edge(false) }

// GetLog reads the entry at index into l: raft.ErrLogNotFound when there
// is none, a *CorruptError when its record cannot be read.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	err := s.use(func(db *pebble.DB) error {
		v, closer, err := db.Get(logKey(index))
		if errors.Is(err, pebble.ErrNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		return decodeEntry(index, v, l)
	})
	if errors.Is(err, raft.ErrLogNotFound) {
		return err
	}
	return s.wrap(fmt.Sprintf("read log entry %d", index), err)
}

// StoreLog writes one entry (StoreLogs).
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes entries, replacing any at the same indexes, in one
// synced batch: all of them survive a crash after it returns, and a crash
// during it keeps all of them or none.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	err := s.use(func(db *pebble.DB) error {
		b := db.NewBatch()
		defer b.Close()
		for _, l := range logs {
			if err := b.Set(logKey(l.Index), encodeEntry(l), nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.Sync)
	})
	return s.wrap(fmt.Sprintf("store log entries %d-%d", logs[0].Index, logs[len(logs)-1].Index), err)
}

// DeleteRange removes the entries from min to max, both included, in one
// synced batch. min > max removes nothing.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	err := s.use(func(db *pebble.DB) error {
		hi := logUpper
		if max < ^uint64(0) {
			hi = logKey(max + 1)
		}
		return db.DeleteRange(logKey(min), hi, pebble.Sync)
	})
	return s.wrap(fmt.Sprintf("delete log entries %d-%d", min, max), err)
}

// Set stores val under key, synced.
func (s *Store) Set(key, val []byte) error {
	err := s.use(func(db *pebble.DB) error {
		return db.Set(stableKey(key), encodeStable(val), pebble.Sync)
	})
	return s.wrap(fmt.Sprintf("set %q", key), err)
}

// Get returns the value of key (a copy), or ErrKeyNotFound ("not found",
// what raft expects) when it was never set.
func (s *Store) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.use(func(db *pebble.DB) error {
		v, closer, err := db.Get(stableKey(key))
		if errors.Is(err, pebble.ErrNotFound) {
			return ErrKeyNotFound
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		out, err = decodeStable(key, v)
		return err
	})
	if errors.Is(err, ErrKeyNotFound) {
		return nil, err
	}
	return out, s.wrap(fmt.Sprintf("get %q", key), err)
}

// SetUint64 stores val under key as 8 big-endian bytes, synced.
func (s *Store) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], val)
	return s.Set(key, b[:])
}

// GetUint64 returns the value SetUint64 stored under key, 0 (and no
// error, as raft's contract says) when it was never set.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if errors.Is(err, ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, s.wrap("", &CorruptError{Key: string(key), Reason: fmt.Sprintf("a uint64 value of %d bytes", len(v))})
	}
	return binary.BigEndian.Uint64(v), nil
}

// Check decodes every log entry and returns how many there are, or the
// first that cannot be read (a *CorruptError naming its index). Raft
// panics on an entry it cannot read at start; a caller that checks first
// can refuse with this error instead.
func (s *Store) Check() (int, error) {
	n := 0
	err := s.use(func(db *pebble.DB) error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
		if err != nil {
			return err
		}
		var l raft.Log
		for ok := it.First(); ok; ok = it.Next() {
			idx, valid := logKeyIndex(it.Key())
			if !valid {
				_ = it.Close()
				return &CorruptError{Key: fmt.Sprintf("%x", it.Key()), Reason: "a log key of the wrong length"}
			}
			v, err := it.ValueAndErr()
			if err == nil {
				err = decodeEntry(idx, v, &l)
			}
			if err != nil {
				_ = it.Close()
				return err
			}
			n++
		}
		return it.Close()
	})
	return n, s.wrap("check the log", err)
}

// pebbleLogger sends Pebble's lines to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "raftlog")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "raftlog")
}

// Fatalf is Pebble's word that it cannot go on (it must not return):
// logged, then Pebble's own default (exit).
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "raftlog")
	pebble.DefaultLogger.Fatalf(format, args...)
}
