package cache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/vfsfile"
)

// trailerMagic starts the metadata frame of every cached file. Frozen.
const trailerMagic = "STCE"

// trailerVersion is the metadata format version this build writes. Version
// 1 appended the frame to the copy; version 2 keeps it in a file of its
// own beside the copy (metaSuffix), so that the copy is exactly the
// object's bytes and can be hard-linked (LocalCopy). Version 1 files have
// no metadata file and are removed when the cache opens.
const trailerVersion = 2

// metaSuffix ends the name of a copy's metadata file.
const metaSuffix = ".meta"

// ErrCorruptCopy is wrapped when a cached copy fails its checksum.
var ErrCorruptCopy = errors.New("cache: local copy does not match its checksum")

// Options configure a cache.
type Options struct {
	// Dir is the cache directory; it is created if missing. Required. One
	// cache owns a directory at a time.
	Dir string
	// MaxBytes bounds the bytes of the cached files. Required, > 0.
	MaxBytes int64
	// NoKeepOnWrite makes Put upload without keeping a local copy (objects
	// are then cached only when read). Default false: writes are cached.
	NoKeepOnWrite bool
	// FS is the file system of Dir; every file operation of the cache goes
	// through it. Default vfs.Default (the operating system's); tests pass
	// a crashable vfs.MemFS to simulate power losses. A caller of
	// LocalCopy opens the path it returns on this FS.
	FS vfs.FS
}

// Stats counts what the cache did.
type Stats struct {
	// Hits and Misses count Get, GetRange and Stat calls answered locally
	// or by the remote.
	Hits, Misses int64
	// Evictions counts copies dropped to make room.
	Evictions int64
	// Corrupt counts cached copies that failed their checksum.
	Corrupt int64
	// Bytes and Entries describe the cache now (Bytes includes
	// reservations of transfers in flight).
	Bytes   int64
	Entries int
}

// Store is a tiered.Store that caches a remote store locally: the
// tiered.Bucket checks in front of a driver that keeps the copies.
type Store struct {
	*tiered.Bucket
	d *driver
}

type driver struct {
	fs     vfs.FS
	remote tiered.Store
	dir    string
	max    int64
	keep   bool

	mu      sync.Mutex
	entries map[string]*entry
	lru     *list.List // of *entry; front is the most recently used
	used    int64      // bytes of entries plus reservations
	pending map[string]map[*op]struct{}
	flights map[string]*flight
	closed  bool

	seq                                  atomic.Uint64
	hits, misses, evictions, corruptions atomic.Int64
}

var _ tiered.Store = (*Store)(nil)

type entry struct {
	name     string
	size     int64 // object bytes
	fileSize int64 // size + metadata file
	crc      uint32
	modTime  time.Time
	verified bool // checked against crc since this process opened the cache
	elem     *list.Element
}

// op is a write or download of one name in flight; another write of the
// name that finishes meanwhile cancels it, so it does not publish a copy.
type op struct{ cancelled bool }

// flight is a download in progress; concurrent misses wait for it.
type flight struct {
	done   chan struct{}
	err    error
	bypass bool // the object does not fit; waiters read the remote
}

// New opens the cache in opts.Dir over remote, rebuilding its index from
// the files there. Close closes remote too.
func New(remote tiered.Store, opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("cache: no directory")
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("cache: max bytes %d must be positive", opts.MaxBytes)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	s := &driver{
		fs: opts.FS, remote: remote, dir: dir, max: opts.MaxBytes, keep: !opts.NoKeepOnWrite,
		entries: map[string]*entry{}, lru: list.New(),
		pending: map[string]map[*op]struct{}{}, flights: map[string]*flight{},
	}
	if err := s.fs.RemoveAll(s.tmpDir()); err != nil {
		return nil, fmt.Errorf("cache: clean temporary files in %s: %w", dir, err)
	}
	for _, d := range []string{s.tmpDir(), s.objDir()} {
		if err := s.fs.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return &Store{Bucket: tiered.New(s), d: s}, nil
}

func (s *driver) tmpDir() string { return filepath.Join(s.dir, "tmp") }
func (s *driver) objDir() string { return filepath.Join(s.dir, "objects") }

// path is where the copy of name lives: named by a hash, so any object
// name maps to one flat file (object names may be prefixes of each other).
// Its metadata is at path+metaSuffix.
func (s *driver) path(name string) string {
	h := sha256.Sum256([]byte(name))
	x := hex.EncodeToString(h[:])
	return filepath.Join(s.objDir(), x[:2], x)
}

// load rebuilds the index from the metadata of the cached files, oldest
// first in the LRU order, and removes files that are not valid copies.
func (s *driver) load() error {
	type found struct {
		e     *entry
		mtime time.Time
	}
	var all []found
	visit := func(p string) {
		data, isMeta := strings.CutSuffix(p, metaSuffix)
		if !isMeta {
			if _, err := s.fs.Stat(p + metaSuffix); err != nil {
				// A copy without metadata (torn publish, or the format
				// of version 1): it cannot serve reads.
				s.fs.Remove(p)
			}
			return
		}
		e, err := readTrailer(s.fs, p, data)
		if err != nil || s.path(e.name) != data {
			// Torn or foreign metadata: the copy cannot serve reads.
			s.fs.Remove(p)
			s.fs.Remove(data)
			return
		}
		info, err := s.fs.Stat(data)
		if err != nil {
			return
		}
		all = append(all, found{e, info.ModTime()})
	}
	// Every file under the objects directory, as filepath.WalkDir would.
	var walk func(dir string) error
	walk = func(dir string) error {
		names, err := s.fs.List(dir)
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(dir, n)
			info, err := s.fs.Stat(p)
			if errors.Is(err, os.ErrNotExist) {
				continue // a torn copy's data file, removed with its metadata
			}
			if err != nil {
				return err
			}
			if info.IsDir() {
				err = walk(p)
			} else {
				visit(p)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	err := walk(s.objDir())
	if err != nil {
		return fmt.Errorf("cache: load index from %s: %w", s.dir, err)
	}
	// Files are touched when used, so their times give the LRU order.
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range all {
		f.e.elem = s.lru.PushFront(f.e)
		s.entries[f.e.name] = f.e
		s.used += f.e.fileSize
	}
	s.evictLocked(0)
	return nil
}

func encodeTrailer(name string, size int64, crc uint32, mod time.Time) []byte {
	payload := binary.LittleEndian.AppendUint64(nil, uint64(size))
	payload = binary.LittleEndian.AppendUint32(payload, crc)
	payload = binary.LittleEndian.AppendUint64(payload, uint64(mod.UnixNano()))
	payload = append(payload, name...)
	return frame.Encode(trailerMagic, trailerVersion, payload)
}

func trailerLen(name string) int64 { return int64(frame.Overhead + 20 + len(name)) }

// readTrailer parses the metadata file meta of the copy data, and checks
// the copy has the size it records.
func readTrailer(fs vfs.FS, meta, data string) (*entry, error) {
	f, err := fs.Open(meta)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, frame.Overhead+20+1024+1))
	if err != nil {
		return nil, err
	}
	if len(buf) < frame.Overhead+20 || len(buf) > frame.Overhead+20+1024 {
		return nil, fmt.Errorf("cache: %s: bad metadata length %d", meta, len(buf))
	}
	_, payload, err := frame.Decode(trailerMagic, buf)
	if err != nil {
		return nil, fmt.Errorf("cache: %s: %w", meta, err)
	}
	if len(payload) < 20 {
		return nil, fmt.Errorf("cache: %s: short metadata", meta)
	}
	e := &entry{
		size:    int64(binary.LittleEndian.Uint64(payload)),
		crc:     binary.LittleEndian.Uint32(payload[8:]),
		modTime: time.Unix(0, int64(binary.LittleEndian.Uint64(payload[12:]))),
		name:    string(payload[20:]),
	}
	fi, err := fs.Stat(data)
	if err != nil {
		return nil, err
	}
	e.fileSize = e.size + int64(len(buf))
	if e.size < 0 || e.size != fi.Size() || tiered.ValidateName(e.name) != nil {
		return nil, fmt.Errorf("cache: %s: metadata says %d bytes of %q, the copy has %d", meta, e.size, e.name, fi.Size())
	}
	return e, nil
}

// Stats returns the cache's counters.
func (s *Store) Stats() Stats {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{
		Hits: d.hits.Load(), Misses: d.misses.Load(), Evictions: d.evictions.Load(),
		Corrupt: d.corruptions.Load(), Bytes: d.used, Entries: len(d.entries),
	}
}

// Cached reports whether name has a local copy.
func (s *Store) Cached(name string) bool {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.entries[name] != nil
}

// Dir is the cache directory.
func (s *Store) Dir() string { return s.d.dir }

// Remote is the store the cache is in front of.
func (s *Store) Remote() tiered.Store { return s.d.remote }

// evictLocked drops least recently used copies until need more bytes fit
// under the bound, and reports whether they do.
func (s *driver) evictLocked(need int64) bool {
	for s.used+need > s.max {
		back := s.lru.Back()
		if back == nil {
			return false // reservations of transfers in flight hold the rest
		}
		s.dropLocked(back.Value.(*entry))
		s.evictions.Add(1)
	}
	return true
}

func (s *driver) dropLocked(e *entry) {
	if s.entries[e.name] != e {
		return
	}
	delete(s.entries, e.name)
	s.lru.Remove(e.elem)
	s.used -= e.fileSize
	// Metadata first: a crash in between leaves a copy without metadata,
	// which load removes.
	p := s.path(e.name)
	s.fs.Remove(p + metaSuffix)
	s.fs.Remove(p)
}

// reserve sets aside n bytes for a transfer, evicting to make room.
func (s *driver) reserve(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || n > s.max || !s.evictLocked(n) {
		return false
	}
	s.used += n
	return true
}

// begin registers an op on name.
func (s *driver) begin(name string) *op {
	o := &op{}
	s.mu.Lock()
	if s.pending[name] == nil {
		s.pending[name] = map[*op]struct{}{}
	}
	s.pending[name][o] = struct{}{}
	s.mu.Unlock()
	return o
}

func (s *driver) endLocked(name string, o *op) {
	delete(s.pending[name], o)
	if len(s.pending[name]) == 0 {
		delete(s.pending, name)
	}
}

// invalidate drops the copy of name and cancels every op on it but self.
func (s *driver) invalidate(name string, self *op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalidateLocked(name, self)
}

func (s *driver) invalidateLocked(name string, self *op) {
	if e := s.entries[name]; e != nil {
		s.dropLocked(e)
	}
	for o := range s.pending[name] {
		if o != self {
			o.cancelled = true
		}
	}
}

// tempFile is a cache file being written, checksummed as it goes.
type tempFile struct {
	fs   vfs.FS
	f    vfs.File
	path string
	crc  hash.Hash32
	n    int64
}

func (s *driver) newTemp() (*tempFile, error) {
	p := filepath.Join(s.tmpDir(), fmt.Sprintf("%d", s.seq.Add(1)))
	f, err := s.fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &tempFile{fs: s.fs, f: f, path: p, crc: crc32.New(frame.Table())}, nil
}

func (t *tempFile) Write(p []byte) (int, error) {
	// The CRC first: a vfs.File may modify p as it writes it (vfs.MemFS
	// does in race and invariants builds). A short write fails the copy,
	// so the CRC of bytes not written is never used.
	t.crc.Write(p)
	n, err := t.f.Write(p)
	t.n += int64(n)
	return n, err
}

func (t *tempFile) discard() {
	if t == nil {
		return
	}
	t.f.Close()
	t.remove()
}

func (t *tempFile) remove() {
	t.fs.Remove(t.path)
	t.fs.Remove(t.path + metaSuffix)
}

// fill copies r (exactly size bytes: the Bucket checks) into t.
func (t *tempFile) fill(r io.Reader) error {
	_, err := io.Copy(t, r)
	return err
}

// seal closes the copy and writes its metadata file. It does not fsync: a
// copy torn by a power loss fails its metadata or CRC check when the cache
// next opens or first uses it, and is fetched from the remote, which holds
// the durable copy.
func (t *tempFile) seal(name string, mod time.Time) (*entry, error) {
	e := &entry{name: name, size: t.n, crc: t.crc.Sum32(), modTime: mod, verified: true}
	if err := t.f.Close(); err != nil {
		return nil, err
	}
	tr := encodeTrailer(name, e.size, e.crc, mod)
	mf, err := t.fs.Create(t.path+metaSuffix, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	_, err = mf.Write(tr)
	if cerr := mf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	e.fileSize = e.size + int64(len(tr))
	return e, nil
}

// publish moves a sealed temporary file into place as name's copy, unless
// o was cancelled. reserved is the reservation it replaces.
func (s *driver) publish(t *tempFile, e *entry, o *op, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used -= reserved
	s.endLocked(e.name, o)
	if o.cancelled || s.closed {
		t.remove()
		return
	}
	p := s.path(e.name)
	if err := s.fs.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.remove()
		return
	}
	s.invalidateLocked(e.name, o)
	if !s.evictLocked(e.fileSize) {
		t.remove()
		return
	}
	// The copy first: a crash in between leaves a copy without metadata,
	// which load removes.
	if err := s.fs.Rename(t.path, p); err != nil {
		t.remove()
		return
	}
	if err := s.fs.Rename(t.path+metaSuffix, p+metaSuffix); err != nil {
		s.fs.Remove(p)
		t.remove()
		return
	}
	e.elem = s.lru.PushFront(e)
	s.entries[e.name] = e
	s.used += e.fileSize
}

func (s *driver) abort(t *tempFile, name string, o *op, reserved int64) {
	t.discard()
	s.mu.Lock()
	s.used -= reserved
	s.endLocked(name, o)
	s.mu.Unlock()
}

func (s *driver) Info() tiered.DriverInfo { return tiered.DriverInfo{Name: "cache"} }

// Classify implements tiered.Driver: what fails is the remote, a Store
// whose errors wrap the sentinels already.
func (s *driver) Classify(error) error { return nil }

// Put implements tiered.Driver.
func (s *driver) Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	remotePut := s.remote.Put
	if ifAbsent {
		remotePut = s.remote.PutIfAbsent
	}
	need := size + trailerLen(name)
	if !s.keep || !s.reserve(need) {
		// No local copy: stream straight to the remote.
		if !ifAbsent {
			s.invalidate(name, nil)
		}
		err := remotePut(ctx, name, r, size)
		if err == nil || !ifAbsent {
			s.invalidate(name, nil)
		}
		return err
	}
	o := s.begin(name)
	if !ifAbsent {
		// A failed Put may leave the old object or the new one; the old
		// copy cannot stay either way.
		s.invalidate(name, o)
	}
	t, err := s.newTemp()
	if err != nil {
		s.abort(nil, name, o, need)
		return err
	}
	if err := t.fill(r); err != nil {
		s.abort(t, name, o, need)
		return err
	}
	// Upload from the local file: the remote may need to seek or retry.
	err = remotePut(ctx, name, io.NewSectionReader(t.f, 0, size), size)
	if err != nil {
		if !ifAbsent || !errors.Is(err, tiered.ErrExists) {
			// The remote may or may not hold the new bytes now.
			s.invalidate(name, o)
		}
		s.abort(t, name, o, need)
		return err
	}
	s.invalidate(name, o)
	e, err := t.seal(name, time.Now())
	if err != nil {
		// The object is stored remotely; only the local copy is lost.
		s.abort(t, name, o, need)
		return nil
	}
	s.publish(t, e, o, need)
	return nil
}

// openCopy opens name's copy, verified, and moves it to the front; nil if
// there is none (or it failed verification and was dropped). The file is
// opened under the lock, so it is the file of the entry returned even when
// a concurrent write replaces the copy right after.
func (s *driver) openCopy(name string) (*entry, vfs.File) {
	s.mu.Lock()
	e := s.entries[name]
	if e == nil {
		s.mu.Unlock()
		return nil, nil
	}
	vf, err := s.fs.Open(s.path(name))
	if err != nil {
		// Removed behind the cache's back.
		s.dropLocked(e)
		s.mu.Unlock()
		return nil, nil
	}
	f := vfsfile.NewOnce(vf)
	s.lru.MoveToFront(e.elem)
	verified := e.verified
	s.mu.Unlock()
	// Keep the recency across restarts (load sorts by it); best effort.
	// vfs.FS cannot set times: on another FS (a test's MemFS) only the
	// LRU order across restarts is lost.
	if s.fs == vfs.Default {
		now := time.Now()
		os.Chtimes(s.path(name), now, now)
	}
	if verified {
		return e, f
	}
	if err := verify(e, f); err != nil {
		f.Close()
		s.corrupt(e)
		return nil, nil
	}
	s.mu.Lock()
	e.verified = true
	s.mu.Unlock()
	return e, f
}

func verify(e *entry, f vfs.File) error {
	h := crc32.New(frame.Table())
	if n, err := io.Copy(h, io.NewSectionReader(f, 0, e.size)); err != nil || n != e.size {
		return fmt.Errorf("%w: %s: read %d of %d bytes: %v", ErrCorruptCopy, e.name, n, e.size, err)
	}
	if h.Sum32() != e.crc {
		return fmt.Errorf("%w: %s", ErrCorruptCopy, e.name)
	}
	return nil
}

func (s *driver) corrupt(e *entry) {
	s.corruptions.Add(1)
	s.mu.Lock()
	s.dropLocked(e)
	s.mu.Unlock()
}

// GetRange implements tiered.Driver: a whole-object read fills the cache
// on a miss, a ranged one does not.
func (s *driver) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	if offset == 0 && length < 0 {
		return s.get(ctx, name)
	}
	if e, f := s.openCopy(name); e != nil {
		s.hits.Add(1)
		n := max(e.size-offset, 0)
		if length >= 0 {
			n = min(n, length)
		}
		return vfsfile.Section(f, f, offset, n), e.size, nil
	}
	s.misses.Add(1)
	rc, err := s.remote.GetRange(ctx, name, offset, length)
	return rc, -1, err
}

func (s *driver) get(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if e, f := s.openCopy(name); e != nil {
			if attempt == 0 {
				s.hits.Add(1)
			} else {
				s.misses.Add(1) // filled from the remote just now
			}
			return &checkedReader{s: s, e: e, f: f, r: io.NewSectionReader(f, 0, e.size), crc: crc32.New(frame.Table())}, e.size, nil
		}
		if attempt > 0 {
			// Filled, yet gone again (evicted at once, or invalidated by
			// a concurrent write): read the remote directly.
			s.misses.Add(1)
			rc, err := s.remote.Get(ctx, name)
			return rc, -1, err
		}
		bypass, err := s.fill(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		if bypass {
			s.misses.Add(1)
			rc, err := s.remote.Get(ctx, name)
			return rc, -1, err
		}
	}
}

// fill downloads name into the cache, or joins a download in progress.
// bypass says the object does not fit and the caller must read the remote.
func (s *driver) fill(ctx context.Context, name string) (bypass bool, err error) {
	s.mu.Lock()
	if fl := s.flights[name]; fl != nil {
		s.mu.Unlock()
		select {
		case <-fl.done:
			return fl.bypass, fl.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if s.entries[name] != nil {
		// Filled by a flight that ended after the caller found no copy
		// and before it got here: a second fill would read the remote
		// again and replace the copy, and a caller that had hard-linked
		// the first one would leave two copies on disk.
		s.mu.Unlock()
		return false, nil
	}
	fl := &flight{done: make(chan struct{})}
	s.flights[name] = fl
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.flights, name)
		s.mu.Unlock()
		fl.bypass, fl.err = bypass, err
		close(fl.done)
	}()

	// The size comes from Stat and the bytes from Get; a concurrent
	// overwrite between the two shows as a size mismatch: try again.
	for attempt := 1; ; attempt++ {
		retry, bypass, err := s.fillOnce(ctx, name)
		if !retry || attempt == 3 {
			return bypass, err
		}
	}
}

var errSizeChanged = errors.New("size changed during download")

func (s *driver) fillOnce(ctx context.Context, name string) (retry, bypass bool, err error) {
	o := s.begin(name)
	info, err := s.remote.Stat(ctx, name)
	if err != nil {
		s.abortOp(name, o)
		return false, false, err
	}
	need := info.Size + trailerLen(name)
	if !s.reserve(need) {
		s.abortOp(name, o)
		return false, true, nil
	}
	t, err := s.newTemp()
	if err != nil {
		s.abort(nil, name, o, need)
		return false, false, err
	}
	rc, err := s.remote.Get(ctx, name)
	if err != nil {
		s.abort(t, name, o, need)
		return false, false, err
	}
	n, err := io.Copy(t, &ctxReader{ctx: ctx, r: io.LimitReader(rc, info.Size+1)})
	rc.Close()
	if err == nil && n != info.Size {
		err = fmt.Errorf("%w: stat said %d bytes, read %d", errSizeChanged, info.Size, n)
	}
	if err != nil {
		s.abort(t, name, o, need)
		return errors.Is(err, errSizeChanged), false, fmt.Errorf("cache: fetch %s: %w", name, err)
	}
	e, err := t.seal(name, info.ModTime)
	if err != nil {
		s.abort(t, name, o, need)
		return false, false, fmt.Errorf("cache: store copy of %s: %w", name, err)
	}
	s.publish(t, e, o, need)
	return false, false, nil
}

func (s *driver) abortOp(name string, o *op) {
	s.mu.Lock()
	s.endLocked(name, o)
	s.mu.Unlock()
}

// checkedReader streams a cached copy and checks its CRC at the end.
type checkedReader struct {
	s   *driver
	e   *entry
	f   vfs.File
	r   io.Reader
	crc hash.Hash32
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	if err == io.EOF && c.crc.Sum32() != c.e.crc {
		c.s.corrupt(c.e)
		return n, fmt.Errorf("%w: %s (dropped; read it again to fetch it from the remote)", ErrCorruptCopy, c.e.name)
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.f.Close() }

// Stat implements tiered.Driver.
func (s *driver) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	s.mu.Lock()
	e := s.entries[name]
	s.mu.Unlock()
	if e != nil {
		s.hits.Add(1)
		return tiered.ObjectInfo{Name: name, Size: e.size, ModTime: e.modTime}, nil
	}
	s.misses.Add(1)
	return s.remote.Stat(ctx, name)
}

// List implements tiered.Driver; the remote answers.
func (s *driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]tiered.ObjectInfo, bool, error) {
	page, err := s.remote.List(ctx, prefix, startAfter, limit)
	return page.Objects, page.Next != "", err
}

// Delete implements tiered.Driver.
func (s *driver) Delete(ctx context.Context, names []string) error {
	for _, n := range names {
		s.invalidate(n, nil)
	}
	var err error
	if len(names) == 1 {
		err = s.remote.Delete(ctx, names[0])
	} else {
		err = s.remote.DeleteBatch(ctx, names)
	}
	// Again: a download that raced the delete must not publish.
	for _, n := range names {
		s.invalidate(n, nil)
	}
	return err
}

// Close implements tiered.Driver: it closes the remote. Cached files stay
// for the next New on the directory.
func (s *driver) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.remote.Close()
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

var _ tiered.LocalCopies = (*Store)(nil)

// LocalCopy implements tiered.LocalCopies: the copy is the cache's own
// file, filled from the remote on a miss (concurrent misses download it
// once), within the cache's bound. An object larger than the bound has no
// copy (tiered.ErrNoLocalCopy).
func (s *Store) LocalCopy(ctx context.Context, name string) (tiered.LocalCopy, error) {
	if err := tiered.ValidateName(name); err != nil {
		return tiered.LocalCopy{}, err
	}
	d := s.d
	for attempt := 0; attempt < 2; attempt++ {
		if err := ctx.Err(); err != nil {
			return tiered.LocalCopy{}, err
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return tiered.LocalCopy{}, fmt.Errorf("cache: local copy of %s: %w", name, tiered.ErrClosed)
		}
		if e := d.entries[name]; e != nil {
			d.lru.MoveToFront(e.elem)
			d.mu.Unlock()
			if attempt == 0 {
				d.hits.Add(1)
			} else {
				d.misses.Add(1)
			}
			return tiered.LocalCopy{Path: d.path(name), Size: e.size, CRC32C: e.crc, Hit: attempt == 0}, nil
		}
		d.mu.Unlock()
		if attempt > 0 {
			break
		}
		bypass, err := d.fill(ctx, name)
		if err != nil {
			return tiered.LocalCopy{}, err
		}
		if bypass {
			break
		}
	}
	// Too large for the bound, or evicted (or replaced) right after it
	// was filled.
	d.misses.Add(1)
	return tiered.LocalCopy{}, fmt.Errorf("cache: %s: %w", name, tiered.ErrNoLocalCopy)
}

// DropLocalCopy implements tiered.LocalCopies; it counts as a corrupt copy.
func (s *Store) DropLocalCopy(name string) {
	d := s.d
	d.corruptions.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.entries[name]; e != nil {
		d.dropLocked(e)
	}
}

// FS is the file system the copies live on (Options.FS).
func (s *Store) FS() vfs.FS { return s.d.fs }
