package localfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/tiered"
)

const tmpDir = ".tmp"

// DefaultListLimit is the page size of List when the caller passes none.
const DefaultListLimit = 1000

// DefaultTempGrace is how old a temporary file must be before Open removes
// it as crash debris when Options.TempGrace is zero.
const DefaultTempGrace = time.Hour

// Options configure a Store.
type Options struct {
	// ReadOnly refuses every Put and Delete, and makes Open create and
	// clean nothing: tools (stated verify) open a running daemon's
	// directory this way without disturbing it.
	ReadOnly bool
	// MustExist makes Open fail if the directory does not exist.
	MustExist bool
	// TempGrace: Open removes temporary files older than this, left by a
	// crashed writer. Younger ones may belong to another live process (a
	// daemon writing while "stated gc" opens the same directory), so they
	// stay. Default DefaultTempGrace.
	TempGrace time.Duration
}

// Store is a directory-backed tiered.Store.
type Store struct {
	root     string
	readOnly bool
	seq      atomic.Uint64
	closed   atomic.Bool
}

var _ tiered.Store = (*Store)(nil)

// errReadOnly is returned by writes to a read-only store.
var errReadOnly = errors.New("localfs: store opened read-only")

// Open opens (creating it if needed) the store rooted at dir with default
// options, removing temporary files an earlier crash left behind.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith opens the store rooted at dir.
func OpenWith(dir string, o Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("localfs: empty directory")
	}
	if o.TempGrace <= 0 {
		o.TempGrace = DefaultTempGrace
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	if o.MustExist || o.ReadOnly {
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("localfs: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("localfs: %s is not a directory", abs)
		}
	}
	if o.ReadOnly {
		return &Store{root: abs, readOnly: true}, nil
	}
	tmp := filepath.Join(abs, tmpDir)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, fmt.Errorf("localfs: clean temporary files: %w", err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > o.TempGrace {
			if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
				return nil, fmt.Errorf("localfs: clean temporary files: %w", err)
			}
		}
	}
	return &Store{root: abs}, nil
}

// Root is the directory the store lives in.
func (s *Store) Root() string { return s.root }

func (s *Store) path(name string) (string, error) {
	if err := tiered.ValidateName(name); err != nil {
		return "", err
	}
	if name == tmpDir || strings.HasPrefix(name, tmpDir+"/") {
		return "", fmt.Errorf("%w: %q is reserved for temporary files", tiered.ErrInvalidName, name)
	}
	if s.closed.Load() {
		return "", errors.New("localfs: store closed")
	}
	return filepath.Join(s.root, filepath.FromSlash(name)), nil
}

// writeTemp copies exactly size bytes from r into a synced temporary file.
func (s *Store) writeTemp(ctx context.Context, name string, r io.Reader, size int64) (string, error) {
	tmp := filepath.Join(s.root, tmpDir, fmt.Sprintf("%d-%d-%s", os.Getpid(), s.seq.Add(1), randomSuffix()))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("localfs: put %s: %w", name, err)
	}
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("localfs: put %s: %w", name, err)
	}
	n, err := io.Copy(f, &ctxReader{ctx: ctx, r: io.LimitReader(r, size+1)})
	if err != nil {
		return fail(err)
	}
	if size >= 0 && n != size {
		return fail(fmt.Errorf("read %d bytes, want %d", n, size))
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("localfs: put %s: %w", name, err)
	}
	return tmp, nil
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Put implements tiered.Store.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, false)
}

// PutIfAbsent implements tiered.Store.
func (s *Store) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, true)
}

func (s *Store) put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if s.readOnly {
		return fmt.Errorf("put %s: %w", name, errReadOnly)
	}
	if size < 0 {
		return fmt.Errorf("localfs: put %s: negative size %d", name, size)
	}
	if ifAbsent {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("localfs: put %s: %w", name, tiered.ErrExists)
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("localfs: put %s: %w", name, err)
	}
	tmp, err := s.writeTemp(ctx, name, r, size)
	if err != nil {
		return err
	}
	if ifAbsent {
		err = os.Link(tmp, p)
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("localfs: put %s: %w", name, tiered.ErrExists)
		}
	} else {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("localfs: put %s: %w", name, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("localfs: put %s: sync directory: %w", name, err)
	}
	return nil
}

func (s *Store) open(name string) (*os.File, os.FileInfo, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("localfs: %s: %w", name, tiered.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("localfs: %s: %w", name, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = tiered.ErrNotFound
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("localfs: %s: %w", name, err)
	}
	return f, fi, nil
}

// Get implements tiered.Store.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, _, err := s.open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

type sectionCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionCloser) Close() error { return s.f.Close() }

// GetRange implements tiered.Store.
func (s *Store) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, fi, err := s.open(name)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > fi.Size() || (offset == fi.Size() && fi.Size() > 0 && length != 0) {
		f.Close()
		return nil, fmt.Errorf("localfs: %s: %w: offset %d of %d bytes", name, tiered.ErrInvalidRange, offset, fi.Size())
	}
	if length < 0 || offset+length > fi.Size() {
		length = fi.Size() - offset
	}
	return sectionCloser{io.NewSectionReader(f, offset, length), f}, nil
}

// Stat implements tiered.Store.
func (s *Store) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	p, err := s.path(name)
	if err != nil {
		return tiered.ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
		return tiered.ObjectInfo{}, fmt.Errorf("localfs: %s: %w", name, tiered.ErrNotFound)
	}
	if err != nil {
		return tiered.ObjectInfo{}, fmt.Errorf("localfs: %s: %w", name, err)
	}
	return tiered.ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List implements tiered.Store. It walks only the directory the prefix
// names (or its parent), so listing one job does not read the others.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	if s.closed.Load() {
		return tiered.ListPage{}, errors.New("localfs: store closed")
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	base := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = prefix[:i]
	}
	if base != "" {
		if err := tiered.ValidateName(base); err != nil {
			return tiered.ListPage{}, err
		}
	}
	var names []tiered.ObjectInfo
	start := filepath.Join(s.root, filepath.FromSlash(base))
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == tmpDir {
				return fs.SkipDir
			}
			// Skip directories that cannot contain a match.
			if rel != "." && !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(rel, prefix) || rel <= startAfter {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return err
		}
		names = append(names, tiered.ObjectInfo{Name: rel, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return tiered.ListPage{}, fmt.Errorf("localfs: list %q: %w", prefix, err)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name < names[j].Name })
	var page tiered.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1].Name
	}
	page.Objects = names
	return page, nil
}

// Delete implements tiered.Store. Empty parent directories are removed
// (best effort) so deleted checkpoints leave no directory litter.
func (s *Store) Delete(ctx context.Context, name string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if s.readOnly {
		return fmt.Errorf("delete %s: %w", name, errReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localfs: delete %s: %w", name, err)
	}
	for dir := filepath.Dir(p); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// DeleteBatch implements tiered.Store.
func (s *Store) DeleteBatch(ctx context.Context, names []string) error {
	var failed []string
	var first error
	for _, n := range names {
		if err := s.Delete(ctx, n); err != nil {
			failed = append(failed, n)
			if first == nil {
				first = err
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("localfs: %d of %d deletes failed (first: %w); not deleted: %s",
			len(failed), len(names), first, strings.Join(failed, ", "))
	}
	return nil
}

// Close implements tiered.Store.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
