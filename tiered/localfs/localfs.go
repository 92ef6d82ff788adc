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
	"strings"
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/tiered"
)

const tmpDir = tiered.ReservedDir

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

// Store is a directory-backed tiered.Store: the tiered.Bucket checks in
// front of a driver that does only the file I/O.
type Store struct {
	*tiered.Bucket
	d *driver
}

var _ tiered.Store = (*Store)(nil)

type driver struct {
	root     string
	readOnly bool
	seq      atomic.Uint64
}

// errReadOnly is returned by writes to a read-only store.
var errReadOnly = errors.New("store opened read-only")

func newStore(d *driver) *Store { return &Store{Bucket: tiered.New(d), d: d} }

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
		return newStore(&driver{root: abs, readOnly: true}), nil
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
	return newStore(&driver{root: abs}), nil
}

// Root is the directory the store lives in.
func (s *Store) Root() string { return s.d.root }

func (d *driver) Info() tiered.DriverInfo {
	return tiered.DriverInfo{Name: "localfs", ListPageSize: DefaultListLimit}
}

// Classify implements tiered.Driver.
func (d *driver) Classify(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return tiered.ErrNotFound
	case errors.Is(err, fs.ErrExist):
		return tiered.ErrExists
	}
	return nil
}

func (d *driver) path(name string) string { return filepath.Join(d.root, filepath.FromSlash(name)) }

// writeTemp copies r into a synced temporary file.
func (d *driver) writeTemp(r io.Reader) (string, error) {
	tmp := filepath.Join(d.root, tmpDir, fmt.Sprintf("%d-%d-%s", os.Getpid(), d.seq.Add(1), randomSuffix()))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Put implements tiered.Driver: a temporary file, synced, then renamed
// (or, if absent, linked) into place, and the directory synced.
func (d *driver) Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	if d.readOnly {
		return errReadOnly
	}
	p := d.path(name)
	if ifAbsent {
		if _, err := os.Lstat(p); err == nil {
			return tiered.ErrExists
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := d.writeTemp(r)
	if err != nil {
		return err
	}
	if ifAbsent {
		err = os.Link(tmp, p)
		os.Remove(tmp)
	} else {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

type sectionCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionCloser) Close() error { return s.f.Close() }

// GetRange implements tiered.Driver.
func (d *driver) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	f, err := os.Open(d.path(name))
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = tiered.ErrNotFound
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	size := fi.Size()
	if offset == 0 && length < 0 {
		// The file itself: io.Copy from it can use copy_file_range.
		return f, size, nil
	}
	n := max(size-offset, 0)
	if length >= 0 {
		n = min(n, length)
	}
	return sectionCloser{io.NewSectionReader(f, offset, n), f}, size, nil
}

// Stat implements tiered.Driver.
func (d *driver) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	fi, err := os.Stat(d.path(name))
	if err == nil && fi.IsDir() {
		err = tiered.ErrNotFound
	}
	if err != nil {
		return tiered.ObjectInfo{}, err
	}
	return tiered.ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List implements tiered.Driver. It walks only the directory the prefix
// names (or its parent), so listing one job does not read the others.
func (d *driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]tiered.ObjectInfo, bool, error) {
	base := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = prefix[:i]
	}
	var names []tiered.ObjectInfo
	start := filepath.Join(d.root, filepath.FromSlash(base))
	err := filepath.WalkDir(start, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.root, p)
		rel = filepath.ToSlash(rel)
		if de.IsDir() {
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
		info, err := de.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return err
		}
		names = append(names, tiered.ObjectInfo{Name: rel, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	// Every match is returned: Bucket sorts and cuts the page.
	return names, false, err
}

// Delete implements tiered.Driver. Empty parent directories are removed
// (best effort) so deleted checkpoints leave no directory litter.
func (d *driver) Delete(ctx context.Context, names []string) error {
	if d.readOnly {
		return errReadOnly
	}
	var failed []string
	var first error
	for _, n := range names {
		if err := d.delete(ctx, n); err != nil {
			failed = append(failed, n)
			if first == nil {
				first = err
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d deletes failed (first: %w); not deleted: %s",
			len(failed), len(names), first, strings.Join(failed, ", "))
	}
	return nil
}

func (d *driver) delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := d.path(name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// Close implements tiered.Driver.
func (d *driver) Close() error { return nil }
