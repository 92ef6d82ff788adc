package lsm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// DefaultDownloadCacheSize is a sensible bound for a DownloadCache.
const DefaultDownloadCacheSize = 2 << 30

// DownloadCache lets the restores of one host share the files they
// download from checkpoint storage. When a job is rescaled, every new
// subtask restores from the old subtasks whose key groups it takes over,
// and a file whose key groups straddle a new boundary (most L0 files, the
// boundary files of every level) is needed by two new subtasks: without
// the cache both download it. With it the first restore downloads it into
// the cache directory and every restore that needs it, the first
// included, gets a hard link (SSTs and blob files, which nothing ever
// rewrites) or a copy (MANIFEST, OPTIONS and any other file Pebble may
// write to) of that one verified download.
//
// The cache is a throwaway: OpenDownloadCache empties its directory (the
// files of an earlier run are never trusted), and it is never a source of
// truth. A file is keyed by its object path, CRC32C and size; every use of
// a cached copy checks its size and CRC32C again, and a copy that does not
// match is dropped and downloaded again. Two restores that ask for the
// same file at once download it once: the second waits for the first.
//
// The cache holds at most MaxBytes bytes (files being downloaded count),
// evicting the least recently used files; a file that cannot fit (larger
// than the bound, or every cached file in use) is downloaded straight into
// the restore without the cache. Evicting removes only the cache's link:
// instances that linked the file keep it. The cache must be on the same
// file system as the instances' directories (Options.FS) for links to
// work; otherwise files are copied.
//
// When the store a restore reads keeps checksummed local copies itself
// (tiered.LocalCopies: a tiered/cache in front of S3), the download cache
// keeps none: it places files from the store's copy, so an object is on
// local disk once (the store cache's file, plus the hard links into the
// instances, which share its inode), under the store cache's bound. Its
// own directory then serves the stores without local copies (a local
// checkpoint directory), where downloads are still shared by subtasks.
//
// Safe for concurrent use by any number of restores.
type DownloadCache struct {
	fs  vfs.FS
	dir string
	max int64

	mu      sync.Mutex
	entries map[cacheKey]*cacheEntry
	lru     list.List // of *cacheEntry, ready ones only, most recently used first
	used    int64     // bytes of the cached files plus those being downloaded
	seq     uint64
	closed  bool
	stats   DownloadCacheStats
}

// DownloadCacheStats counts what a DownloadCache did.
type DownloadCacheStats struct {
	// Hits are the files placed from a cached copy; Misses those the cache
	// downloaded (once for all the restores that asked meanwhile); Bypasses
	// those downloaded without the cache (no room); Corrupt the cached
	// copies that failed their check and were dropped.
	Hits, Misses, Bypasses, Corrupt int64
	// Waits are the fetches that waited for another restore's download
	// of the same file (each then counts as a hit, or retries).
	Waits int64
	// Evictions are the files removed to make room.
	Evictions int64
	// Bytes is what the cache holds now (downloads under way included),
	// Files the number of cached files.
	Bytes int64
	Files int
}

type cacheKey struct {
	path string
	crc  uint32
	size int64
}

type cacheEntry struct {
	key  cacheKey
	name string // file name in the cache directory
	// done is closed when the download ends; ok says whether it succeeded
	// (set before done is closed, read after).
	done chan struct{}
	ok   bool
	// pins counts the restores using the file right now; a pinned entry is
	// never evicted, and a dropped one (dead) is removed when the last pin
	// goes.
	pins int
	dead bool
	elem *list.Element
}

// OpenDownloadCache returns a cache of at most maxBytes bytes in dir on fs
// (nil: vfs.Default). It removes whatever dir held and creates it.
func OpenDownloadCache(fs vfs.FS, dir string, maxBytes int64) (*DownloadCache, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if dir == "" {
		return nil, fmt.Errorf("lsm: download cache: %w: no directory", backend.ErrInvalidArgument)
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("lsm: download cache: %w: bound %d is not positive", backend.ErrInvalidArgument, maxBytes)
	}
	if err := fs.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("lsm: download cache: clear %s: %w", dir, err)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lsm: download cache: %w", err)
	}
	return &DownloadCache{fs: fs, dir: dir, max: maxBytes, entries: map[cacheKey]*cacheEntry{}}, nil
}

// MaxBytes returns the cache's bound.
func (c *DownloadCache) MaxBytes() int64 { return c.max }

// Stats returns the cache's counters.
func (c *DownloadCache) Stats() DownloadCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes = c.used
	s.Files = len(c.entries)
	return s
}

// Close removes the cached files (files linked into instances stay) and
// makes the cache a pass-through. Restores still running finish normally.
func (c *DownloadCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, e := range c.entries {
		errs = append(errs, c.dropLocked(e))
	}
	return errors.Join(errs...)
}

func (c *DownloadCache) path(e *cacheEntry) string { return c.fs.PathJoin(c.dir, e.name) }

// dropLocked forgets e; its file goes now or, if pinned, with the last pin.
func (c *DownloadCache) dropLocked(e *cacheEntry) error {
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
	if e.dead {
		return nil
	}
	e.dead = true
	if e.pins > 0 {
		return nil
	}
	return c.removeLocked(e)
}

// removeLocked removes the file of a dead, unpinned entry.
func (c *DownloadCache) removeLocked(e *cacheEntry) error {
	c.used -= e.key.size
	err := c.fs.Remove(c.path(e))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}

func (c *DownloadCache) unpin(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.pins--
	if e.pins == 0 && e.dead {
		_ = c.removeLocked(e)
	}
}

// reserveLocked makes room for n more bytes, evicting unpinned files from
// the least recently used on, and reports whether it could.
func (c *DownloadCache) reserveLocked(n int64) bool {
	if n > c.max {
		return false
	}
	for el := c.lru.Back(); el != nil && c.used+n > c.max; {
		prev := el.Prev()
		if e := el.Value.(*cacheEntry); e.pins == 0 {
			_ = c.dropLocked(e)
			c.stats.Evictions++
		}
		el = prev
	}
	if c.used+n > c.max {
		return false
	}
	c.used += n
	return true
}

// fetch places the object key at dst (which must not exist): a hard link
// to the cached copy when link is set, else a copy of it; with dst "" it
// only makes sure the object is there and matches (a restore checks the
// empty WAL files it does not restore). On a miss, get
// downloads the object into the path it is given, checking its size and
// CRC32C. It reports whether the bytes came from the cache (a download
// by another restore, waited for, counts).
func (c *DownloadCache) fetch(ctx context.Context, key cacheKey, dst string, link bool, get func(path string) error) (hit bool, err error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.stats.Bypasses++
			c.mu.Unlock()
			return false, get(dst)
		}
		if e := c.entries[key]; e != nil {
			if !e.ok {
				// Being downloaded: wait, then look again (the download may
				// have failed, or been cancelled with its restore).
				done := e.done
				c.stats.Waits++
				c.mu.Unlock()
				select {
				case <-done:
					continue
				case <-ctx.Done():
					return false, ctx.Err()
				}
			}
			e.pins++
			c.lru.MoveToFront(e.elem)
			c.mu.Unlock()
			err := c.place(e, dst, link)
			c.unpin(e)
			if err == nil {
				c.mu.Lock()
				c.stats.Hits++
				c.mu.Unlock()
				return true, nil
			}
			var bad *corruptCopyError
			if !errors.As(err, &bad) {
				return false, err
			}
			// The cached copy is damaged (or gone): drop it and download
			// the object again.
			c.mu.Lock()
			c.stats.Corrupt++
			_ = c.dropLocked(e)
			c.mu.Unlock()
			continue
		}
		if !c.reserveLocked(key.size) {
			c.stats.Bypasses++
			c.mu.Unlock()
			return false, get(dst)
		}
		c.seq++
		e := &cacheEntry{key: key, name: strconv.FormatUint(c.seq, 10), done: make(chan struct{}), pins: 1}
		c.entries[key] = e
		c.stats.Misses++
		c.mu.Unlock()

		final := c.path(e)
		tmp := final + ".part"
		err := get(tmp)
		if err == nil {
			err = c.fs.Rename(tmp, final)
		}
		c.mu.Lock()
		if err != nil {
			_ = c.fs.Remove(tmp)
			_ = c.dropLocked(e)
		} else if !e.dead {
			e.ok = true
			e.elem = c.lru.PushFront(e)
		}
		close(e.done)
		c.mu.Unlock()
		if err == nil {
			// Just verified by get: link or copy without checking again.
			err = c.transfer(final, dst, link, nil)
		}
		c.unpin(e)
		return false, err
	}
}

// fetchFrom is fetch for an object of store: from store's own local copy
// when it keeps one (see DownloadCache), else through the cache's own
// directory.
func (c *DownloadCache) fetchFrom(ctx context.Context, store tiered.Store, key cacheKey, dst string, link bool, get func(path string) error) (hit bool, err error) {
	lc, ok := tiered.AsLocalCopies(store)
	if !ok || !sameFS(c.fs, vfs.Default) {
		// The store's copies are files of the OS: they can be linked
		// only into directories of vfs.Default.
		return c.fetch(ctx, key, dst, link, get)
	}
	for attempt := 0; ; attempt++ {
		cp, err := lc.LocalCopy(ctx, key.path)
		if errors.Is(err, tiered.ErrNoLocalCopy) {
			c.count(&c.stats.Bypasses)
			return false, get(dst)
		}
		if errors.Is(err, tiered.ErrNotFound) {
			return false, fmt.Errorf("%w: %w", backend.ErrNotFound, err)
		}
		if err != nil {
			return false, err
		}
		if cp.Size != key.size || cp.CRC32C != key.crc {
			if cp.Hit && attempt == 0 {
				// A copy of other bytes than the handle's (a stale or
				// damaged one): download the object again.
				c.count(&c.stats.Corrupt)
				lc.DropLocalCopy(key.path)
				continue
			}
			return false, fmt.Errorf("%w: %d bytes with CRC32C %#08x, the handle says %d bytes with %#08x",
				backend.ErrCorrupt, cp.Size, cp.CRC32C, key.size, key.crc)
		}
		// A copy made just now was checksummed as it was written; an
		// older one is checked again as it is placed.
		var check *cacheKey
		if cp.Hit {
			check = &key
		}
		err = c.transfer(cp.Path, dst, link, check)
		if err == nil {
			if cp.Hit {
				c.count(&c.stats.Hits)
			} else {
				c.count(&c.stats.Misses)
			}
			return cp.Hit, nil
		}
		var bad *corruptCopyError
		_, statErr := c.fs.Stat(cp.Path)
		evicted := errors.Is(statErr, os.ErrNotExist)
		if attempt > 0 || (!evicted && !errors.As(err, &bad)) {
			return false, err
		}
		// Evicted before it was placed, or damaged: fetch it again.
		if !evicted {
			c.count(&c.stats.Corrupt)
			lc.DropLocalCopy(key.path)
		}
	}
}

func (c *DownloadCache) count(n *int64) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

// corruptCopyError is a cached copy that failed its check.
type corruptCopyError struct{ err error }

func (e *corruptCopyError) Error() string { return "cached copy: " + e.err.Error() }
func (e *corruptCopyError) Unwrap() error { return e.err }

// place checks the cached copy of e and links or copies it to dst.
func (c *DownloadCache) place(e *cacheEntry, dst string, link bool) error {
	return c.transfer(c.path(e), dst, link, &e.key)
}

// transfer links (link) or copies src to dst; with check set it first
// verifies src's size and CRC32C (a copy verifies what it copies), and a
// mismatch, or a src that is gone, is a *corruptCopyError.
func (c *DownloadCache) transfer(src, dst string, link bool, check *cacheKey) error {
	fs := c.fs
	if dst == "" || link {
		if check != nil {
			f, err := fs.Open(src)
			if err != nil {
				return &corruptCopyError{err}
			}
			err = verifyCopy(f, io.Discard, *check)
			f.Close()
			if err != nil {
				return err
			}
		}
		if dst == "" {
			return nil
		}
		return vfs.LinkOrCopy(fs, src, dst)
	}
	f, err := fs.Open(src)
	if err != nil {
		if check != nil {
			return &corruptCopyError{err}
		}
		return err
	}
	defer f.Close()
	out, err := fs.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if check != nil {
		err = verifyCopy(f, out, *check)
	} else {
		_, err = io.Copy(out, f)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = fs.Remove(dst)
	}
	return err
}

// verifyCopy copies r to w and checks size and CRC32C against k; a
// mismatch (or a read error) is a *corruptCopyError.
func verifyCopy(r io.Reader, w io.Writer, k cacheKey) error {
	crc := crc32.New(frame.Table())
	var werr error
	n, err := io.Copy(io.MultiWriter(crc, writerFunc(func(p []byte) (int, error) {
		if werr == nil {
			_, werr = w.Write(p)
		}
		return len(p), nil
	})), io.LimitReader(r, k.size+1))
	switch {
	case err != nil:
		return &corruptCopyError{err}
	case werr != nil:
		return werr
	case n != k.size:
		return &corruptCopyError{fmt.Errorf("%d bytes, want %d", n, k.size)}
	case crc.Sum32() != k.crc:
		return &corruptCopyError{fmt.Errorf("CRC32C %#08x, want %#08x", crc.Sum32(), k.crc)}
	}
	return nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// linkable reports whether a restored file may be a hard link shared with
// other instances: SSTs and blob files are written once and never changed
// (Pebble only creates and deletes them); a MANIFEST, OPTIONS file or WAL
// may be appended to or rewritten, so each instance gets its own copy.
func linkable(localName string) bool {
	return strings.HasSuffix(localName, ".sst") || strings.HasSuffix(localName, ".blob")
}

// sameFS reports whether two file systems are the same value (a cache
// can link into the instance's directories).
func sameFS(a, b vfs.FS) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
