package localfs

import (
	"bytes"
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

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/vfsfile"
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
	// FS is the file system every file and directory operation goes
	// through, fsyncs included. Default vfs.Default (the operating
	// system's); tests pass a crashable vfs.MemFS to simulate power
	// losses. With another FS, the directory should be absolute.
	FS vfs.FS
	// PackSize is the size of each pack file Append writes into (see
	// "Packs" in the package doc). Default DefaultPackSize.
	PackSize int64
	// MaxPacked is the largest object Append packs; a larger one is
	// written as a file, as Put does. Default DefaultMaxPacked; at most
	// PackSize/4.
	MaxPacked int64
}

// Store is a directory-backed tiered.Store: the tiered.Bucket checks in
// front of a driver that does only the file I/O.
type Store struct {
	*tiered.Bucket
	d *driver
}

var _ tiered.Store = (*Store)(nil)

type driver struct {
	fs       vfs.FS
	root     string
	readOnly bool
	seq      atomic.Uint64

	packs     *packs // see pack.go
	packSize  int64
	maxPacked int64
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
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.PackSize == 0 {
		o.PackSize = DefaultPackSize
	}
	if o.MaxPacked == 0 {
		o.MaxPacked = min(DefaultMaxPacked, o.PackSize/4)
	}
	switch {
	case o.PackSize < 4<<10 || o.PackSize > 1<<30:
		return nil, fmt.Errorf("localfs: PackSize %d is outside [4 KiB, 1 GiB]", o.PackSize)
	case o.MaxPacked < 0 || o.MaxPacked > o.PackSize/4 || o.MaxPacked > maxPackedLimit:
		return nil, fmt.Errorf("localfs: MaxPacked %d is outside [0, min(PackSize/4, 64 MiB)]", o.MaxPacked)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	d := &driver{fs: o.FS, root: abs, readOnly: o.ReadOnly, packSize: o.PackSize, maxPacked: o.MaxPacked}
	d.packs = newPacks(d)
	if o.MustExist || o.ReadOnly {
		fi, err := d.fs.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("localfs: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("localfs: %s is not a directory", abs)
		}
	}
	if o.ReadOnly {
		return newStore(d), nil
	}
	tmp := filepath.Join(abs, tmpDir)
	if err := d.mkdirAll(tmp); err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	names, err := d.fs.List(tmp)
	if err != nil {
		return nil, fmt.Errorf("localfs: clean temporary files: %w", err)
	}
	for _, n := range names {
		p := filepath.Join(tmp, n)
		if info, err := d.fs.Stat(p); err == nil && time.Since(info.ModTime()) > o.TempGrace {
			if err := d.fs.RemoveAll(p); err != nil {
				return nil, fmt.Errorf("localfs: clean temporary files: %w", err)
			}
		}
	}
	if err := d.packs.cleanup(); err != nil {
		return nil, fmt.Errorf("localfs: clean pack files: %w", err)
	}
	return newStore(d), nil
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
	tmp := d.tempName()
	f, err := d.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, r)
	if err == nil && n == 0 {
		// An empty write stamps the modification time on a file system
		// that sets it only on writes (vfs.MemFS); GC's grace period
		// reads it.
		_, err = f.Write(nil)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		d.fs.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// tempName is a new name in the temporary directory.
func (d *driver) tempName() string {
	return filepath.Join(d.root, tmpDir, fmt.Sprintf("%d-%d-%s", os.Getpid(), d.seq.Add(1), randomSuffix()))
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (d *driver) syncDir(dir string) error {
	f, err := d.fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// mkdirAll creates dir and its missing parents, syncing the parent of each
// directory it creates: a file renamed into a new directory, and the
// directory synced, is still lost in a power loss if the directory's own
// entry in its parent never reached the disk.
func (d *driver) mkdirAll(dir string) error {
	if fi, err := d.fs.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := d.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := d.fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if parent == dir {
		return nil
	}
	if err := d.syncDir(parent); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// Put implements tiered.Driver: a temporary file, synced, then renamed
// (or, if absent, linked) into place, and the directory synced.
func (d *driver) Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	if d.readOnly {
		return errReadOnly
	}
	if ifAbsent {
		if _, ok, err := d.packs.stat(name); err != nil {
			return err
		} else if ok {
			return tiered.ErrExists
		}
	}
	if err := d.put(name, r, ifAbsent); err != nil {
		return err
	}
	// A packed object of the name is now hidden by the file (files win);
	// its frame is dead.
	return d.packs.removeKnown(name)
}

func (d *driver) put(name string, r io.Reader, ifAbsent bool) error {
	p := d.path(name)
	if fi, err := d.fs.Stat(p); err == nil {
		switch {
		case fi.IsDir():
			// rename(2) refuses to replace a directory with a file; not
			// every FS does (vfs.MemFS would drop the objects under it).
			return fmt.Errorf("%s is a directory of other objects", name)
		case ifAbsent:
			return tiered.ErrExists
		}
	}
	if err := d.mkdirAll(filepath.Dir(p)); err != nil {
		return err
	}
	tmp, err := d.writeTemp(r)
	if err != nil {
		return err
	}
	if ifAbsent {
		err = d.fs.Link(tmp, p)
		d.fs.Remove(tmp)
	} else {
		err = d.fs.Rename(tmp, p)
	}
	if err != nil {
		d.fs.Remove(tmp)
		return err
	}
	if err := d.syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// GetRange implements tiered.Driver.
func (d *driver) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	vf, err := d.fs.Open(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		// A packed object (files win: see "Packs" in the package doc).
		data, ok, perr := d.packs.get(name)
		switch {
		case perr != nil:
			return nil, 0, perr
		case ok:
			size := int64(len(data))
			lo := min(offset, size)
			hi := size
			if length >= 0 {
				hi = min(size, lo+length)
			}
			return bytesReader(data[lo:hi]), size, nil
		}
	}
	if err != nil {
		return nil, 0, err
	}
	f := vfsfile.NewOnce(vf)
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
	return vfsfile.Section(f, f, offset, n), size, nil
}

// Stat implements tiered.Driver.
func (d *driver) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	fi, err := d.fs.Stat(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		info, ok, perr := d.packs.stat(name)
		switch {
		case perr != nil:
			return tiered.ObjectInfo{}, perr
		case ok:
			return info, nil
		}
	}
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
	if err := d.walk(ctx, base, prefix, startAfter, &names); err != nil {
		return nil, false, err
	}
	packed := map[string]tiered.ObjectInfo{}
	if err := d.packs.list(prefix, startAfter, packed); err != nil {
		return nil, false, err
	}
	for _, o := range names {
		delete(packed, o.Name) // files win
	}
	for _, o := range packed {
		names = append(names, o)
	}
	// Every match is returned: Bucket sorts and cuts the page.
	return names, false, nil
}

// walk adds the objects under the directory rel (slash-separated, ""
// for the root) that match prefix and sort after startAfter.
func (d *driver) walk(ctx context.Context, rel, prefix, startAfter string, out *[]tiered.ObjectInfo) error {
	dir := d.path(rel)
	if rel == "" {
		dir = d.root
	}
	entries, err := d.fs.List(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the prefix names no directory, or it was deleted while listing
		}
		return err
	}
	sort.Strings(entries)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e
		if rel != "" {
			name = rel + "/" + e
		}
		info, err := d.fs.Stat(d.path(name))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted while listing
			}
			return err
		}
		if info.IsDir() {
			// Skip the temporary files and directories that cannot
			// contain a match.
			if name == tmpDir || name == packDir || !strings.HasPrefix(name+"/", prefix) && !strings.HasPrefix(prefix, name+"/") {
				continue
			}
			if err := d.walk(ctx, name, prefix, startAfter, out); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(name, prefix) || name <= startAfter {
			continue
		}
		*out = append(*out, tiered.ObjectInfo{Name: name, Size: info.Size(), ModTime: info.ModTime()})
	}
	return nil
}

// Delete implements tiered.Driver. Empty parent directories are removed
// (best effort) so deleted checkpoints leave no directory litter. The
// directories are synced before Delete returns: a delete the caller was
// told is done must not come back after a power loss (the catalog deletes
// a manifest before the files only it referenced; a manifest that came
// back would name files that are gone).
func (d *driver) Delete(ctx context.Context, names []string) error {
	if d.readOnly {
		return errReadOnly
	}
	var failed []string
	var first error
	if err := d.packs.remove(names); err != nil {
		failed = append(failed, "packed objects")
		first = err
	}
	dirty := map[string]bool{}
	for _, n := range names {
		if err := d.delete(ctx, n, dirty); err != nil {
			failed = append(failed, n)
			if first == nil {
				first = err
			}
		}
	}
	dirs := make([]string, 0, len(dirty))
	for dir := range dirty {
		dirs = append(dirs, dir)
	}
	// Deepest first, so a directory is synced after its children were.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, dir := range dirs {
		if err := d.syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// A directory removed since by a concurrent delete was
			// synced out of its parent by that delete.
			failed = append(failed, "sync "+dir)
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

// delete removes name and its emptied parent directories, and marks the
// directories whose entries changed in dirty.
func (d *driver) delete(ctx context.Context, name string, dirty map[string]bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := d.path(name)
	if err := d.fs.Remove(p); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	dir := filepath.Dir(p)
	dirty[dir] = true
	for ; dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if d.fs.Remove(dir) != nil {
			break
		}
		delete(dirty, dir)
		dirty[filepath.Dir(dir)] = true
	}
	return nil
}

// Close implements tiered.Driver.
func (d *driver) Close() error {
	d.packs.close()
	return nil
}

// Append implements tiered.Appender: data goes into this process's pack
// file (see "Packs" in the package doc). An object larger than
// Options.MaxPacked, or a name that is a file already, is written as Put
// writes it.
func (s *Store) Append(ctx context.Context, name string, data []byte) error {
	if err := tiered.ValidateName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d := s.d
	if d.readOnly {
		return fmt.Errorf("localfs: append %s: %w", name, errReadOnly)
	}
	if _, err := d.fs.Stat(d.path(name)); int64(len(data)) > d.maxPacked || err == nil {
		return s.Put(ctx, name, bytes.NewReader(data), int64(len(data)))
	}
	if err := d.packs.appendObject(ctx, name, data); err != nil {
		return fmt.Errorf("localfs: append %s: %w", name, err)
	}
	return nil
}

// FS is the file system the store lives on.
func (s *Store) FS() vfs.FS { return s.d.fs }
