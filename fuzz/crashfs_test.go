package fuzz

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashWorld is the file systems of one simulated host, each a crashable
// vfs.MemFS seen through a crashFS that counts its mutating operations
// (create, write, sync, rename, remove, link, mkdir, ...). Before the
// operations at chosen counts it takes a crash clone of every file system
// at once, with no operation of any of them in flight: the host as a power
// loss just before that operation would leave it.
type crashWorld struct {
	// mu is held shared by every mutating operation and exclusively
	// while the clones are taken.
	mu sync.RWMutex
	n  atomic.Int64
	// crashAt decides, for operation i, whether to crash before it; nil:
	// never. It must be cheap: every operation asks.
	crashAt func(i int64) bool
	// onCrash gets the clones (in the order of fss) of a crash before
	// operation i (op on path), called with mu held exclusively.
	onCrash func(i int64, op, path string, clones []*vfs.MemFS)
	// cfg gives the clone configuration of a crash: how much unsynced
	// data survives. Called with mu held exclusively.
	cfg func(i int64, fs int) vfs.CrashCloneCfg
	fss []*crashFS

	kindsMu sync.Mutex
	kinds   map[string]int64 // operations by kind and area
}

func newCrashWorld() *crashWorld { return &crashWorld{kinds: map[string]int64{}} }

// add puts a fresh crashable MemFS into the world; area(path) names the
// part of it a path is in, for the operation counts.
func (w *crashWorld) add(area func(path string) string) *crashFS {
	fs := &crashFS{mem: vfs.NewCrashableMem(), w: w, area: area}
	w.fss = append(w.fss, fs)
	return fs
}

// before is called before every mutating operation; the caller then runs
// the operation holding w.mu shared (done releases it).
func (w *crashWorld) before(fs *crashFS, op, path string) (done func()) {
	i := w.n.Add(1)
	key := fs.area(path) + " " + op
	w.kindsMu.Lock()
	w.kinds[key]++
	w.kindsMu.Unlock()
	if w.crashAt != nil && w.crashAt(i) {
		w.mu.Lock()
		clones := make([]*vfs.MemFS, len(w.fss))
		for k, f := range w.fss {
			clones[k] = f.mem.CrashClone(w.cfg(i, k))
		}
		w.onCrash(i, op, path, clones)
		w.mu.Unlock()
	}
	w.mu.RLock()
	return w.mu.RUnlock
}

// ops returns the number of mutating operations so far.
func (w *crashWorld) ops() int64 { return w.n.Load() }

// summary lists the operation counts by area and kind.
func (w *crashWorld) summary() string {
	w.kindsMu.Lock()
	defer w.kindsMu.Unlock()
	keys := make([]string, 0, len(w.kinds))
	for k := range w.kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d; ", k, w.kinds[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// cloneCfg is the mix of crash clones the suite takes, by point: at even
// points exactly the synced data survives; at the others each unsynced
// 4 KiB block and directory entry survives with probability 1/2 or 9/10
// (torn writes, entries that reached the disk in another order than they
// were made), drawn from an RNG seeded by the point, so that a failure
// reproduces.
func cloneCfg(i int64, seed uint64) vfs.CrashCloneCfg {
	switch i % 4 {
	case 1:
		return vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, uint64(i)))}
	case 3:
		return vfs.CrashCloneCfg{UnsyncedDataPercent: 90, RNG: rand.New(rand.NewPCG(seed, uint64(i)))}
	}
	return vfs.CrashCloneCfg{}
}

// crashFS is a vfs.FS over a crashable MemFS whose mutating operations
// count as crash points of its world. Reads are not counted: a power loss
// before a read leaves what it leaves before the next write.
type crashFS struct {
	mem  *vfs.MemFS
	w    *crashWorld
	area func(path string) string
}

var _ vfs.FS = (*crashFS)(nil)

func (f *crashFS) wrap(file vfs.File, path string, err error) (vfs.File, error) {
	if err != nil || file == nil {
		return file, err
	}
	return &crashFile{File: file, fs: f, path: path}, nil
}

func (f *crashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	defer f.w.before(f, "create", name)()
	file, err := f.mem.Create(name, c)
	return f.wrap(file, name, err)
}

func (f *crashFS) Link(oldname, newname string) error {
	defer f.w.before(f, "link", newname)()
	return f.mem.Link(oldname, newname)
}

func (f *crashFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.mem.Open(name, opts...)
	return f.wrap(file, name, err)
}

func (f *crashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	defer f.w.before(f, "create", name)()
	file, err := f.mem.OpenReadWrite(name, c, opts...)
	return f.wrap(file, name, err)
}

func (f *crashFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.mem.OpenDir(name)
	return f.wrap(file, name, err)
}

func (f *crashFS) Remove(name string) error {
	defer f.w.before(f, "remove", name)()
	return f.mem.Remove(name)
}

func (f *crashFS) RemoveAll(name string) error {
	defer f.w.before(f, "remove", name)()
	return f.mem.RemoveAll(name)
}

func (f *crashFS) Rename(oldname, newname string) error {
	defer f.w.before(f, "rename", newname)()
	return f.mem.Rename(oldname, newname)
}

func (f *crashFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	defer f.w.before(f, "rename", newname)()
	file, err := f.mem.ReuseForWrite(oldname, newname, c)
	return f.wrap(file, newname, err)
}

func (f *crashFS) MkdirAll(dir string, perm os.FileMode) error {
	defer f.w.before(f, "mkdir", dir)()
	return f.mem.MkdirAll(dir, perm)
}

func (f *crashFS) Lock(name string) (io.Closer, error) { return f.mem.Lock(name) }
func (f *crashFS) List(dir string) ([]string, error)   { return f.mem.List(dir) }
func (f *crashFS) Stat(name string) (vfs.FileInfo, error) {
	return f.mem.Stat(name)
}
func (f *crashFS) PathBase(p string) string       { return f.mem.PathBase(p) }
func (f *crashFS) PathJoin(elem ...string) string { return f.mem.PathJoin(elem...) }
func (f *crashFS) PathDir(p string) string        { return f.mem.PathDir(p) }
func (f *crashFS) Unwrap() vfs.FS                 { return f.mem }
func (f *crashFS) GetDiskUsage(p string) (vfs.DiskUsage, error) {
	return f.mem.GetDiskUsage(p)
}

// crashFile counts the mutating operations on an open file.
type crashFile struct {
	vfs.File
	fs   *crashFS
	path string
}

func (f *crashFile) Write(p []byte) (int, error) {
	defer f.fs.w.before(f.fs, "write", f.path)()
	return f.File.Write(p)
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	defer f.fs.w.before(f.fs, "write", f.path)()
	return f.File.WriteAt(p, off)
}

func (f *crashFile) Preallocate(off, n int64) error {
	defer f.fs.w.before(f.fs, "write", f.path)()
	return f.File.Preallocate(off, n)
}

func (f *crashFile) Sync() error {
	defer f.fs.w.before(f.fs, "sync", f.path)()
	return f.File.Sync()
}

func (f *crashFile) SyncData() error {
	defer f.fs.w.before(f.fs, "sync", f.path)()
	return f.File.SyncData()
}

func (f *crashFile) SyncTo(length int64) (bool, error) {
	defer f.fs.w.before(f.fs, "sync", f.path)()
	return f.File.SyncTo(length)
}
