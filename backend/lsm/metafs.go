package lsm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// metaMemFS keeps the small metadata files of the instance's live store
// (its db directory: MANIFEST, OPTIONS, markers, temporary files;
// metaPrefixes) in memory and everything else on disk. Nothing local outlives the
// instance (Open clears its directory; the WAL is off; checkpoints read
// these files through this file system and upload them), so the metadata
// need not be on disk at all, and a new store then creates no file there:
// on ext4, creating files is what opening thousands of idle instances
// spends its time on (openFresh). Tables, blob files and the secondary
// cache stay on disk. The memory is bounded: Pebble rewrites a MANIFEST
// past Options.MaxManifestFileSize, and the rest are a few KiB.
//
// Files that others put in the directory (a restore's download cache
// links or copies the base's MANIFEST there with its own file system) are
// found on disk: a metadata name is looked up in memory first, then on
// disk, and a rename or link between the two sides copies.
//
// Lazy (a new, empty instance): the directories under the instance's own
// directory (the db directory's parent) are made in memory only, and on
// disk when a file is first written there, so an instance that never
// flushes creates nothing on disk at all. Only this file system writes
// there then; a restore, whose download cache writes with its own file
// system, makes its directories at once.
type metaMemFS struct {
	vfs.FS
	mem  *vfs.MemFS
	dir  string // the directory whose metadata lives in memory
	root string // the instance's directory, dir's parent
	lazy bool
}

func newMetaMemFS(disk vfs.FS, dir string, lazy bool) *metaMemFS {
	dir = disk.PathJoin(dir)
	return &metaMemFS{FS: disk, mem: vfs.NewMem(), dir: dir, root: disk.PathDir(dir), lazy: lazy}
}

// deferred reports whether name is under the instance's directory while
// its directories are made lazily.
func (m *metaMemFS) deferred(name string) bool {
	if !m.lazy {
		return false
	}
	p := m.FS.PathJoin(name)
	return p == m.root || strings.HasPrefix(p, m.root+"/")
}

// onDisk makes the directory that will hold name on disk, if it is only
// in memory so far.
func (m *metaMemFS) onDisk(name string) error {
	if !m.deferred(name) {
		return nil
	}
	return m.FS.MkdirAll(m.FS.PathDir(name), 0o755)
}

// metaPrefixes name the small metadata files of a store: Pebble's
// MANIFEST, OPTIONS, markers, the remote object catalog and temporary
// files, the old CURRENT (and, by suffix, the empty logs of a store
// without a WAL). Anything else (tables, blob files, the
// secondary cache's SHARED-CACHE files, a graft's staged MANIFEST) stays
// on disk.
var metaPrefixes = []string{"MANIFEST-", "OPTIONS-", "marker.", "REMOTE-OBJ-CATALOG-", "temporary.", "CURRENT"}

// inMem reports whether name is a metadata file of the directory.
func (m *metaMemFS) inMem(name string) bool {
	if m.FS.PathDir(name) != m.dir {
		return false
	}
	base := m.FS.PathBase(name)
	if strings.HasSuffix(base, ".log") {
		// Pebble makes a log file per memtable even with the WAL off;
		// nothing is written to it.
		return true
	}
	for _, p := range metaPrefixes {
		if strings.HasPrefix(base, p) {
			// A graft stages a MANIFEST as <name>.graft, and the download
			// cache its files as <name>.part: on disk, with their own
			// file systems' renames.
			return !strings.HasSuffix(base, ".graft") && !strings.HasSuffix(base, ".part")
		}
	}
	return false
}

// side is the file system that holds name now: memory for a metadata
// file unless only the disk has it.
func (m *metaMemFS) side(name string) vfs.FS {
	if !m.inMem(name) {
		return m.FS
	}
	if _, err := m.mem.Stat(name); err != nil && oserrorNotExist(err) {
		if _, derr := m.FS.Stat(name); derr == nil {
			return m.FS
		}
	}
	return m.mem
}

func oserrorNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist)
}

func (m *metaMemFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if m.inMem(name) {
		if err := m.mem.MkdirAll(m.dir, 0o755); err != nil {
			return nil, err
		}
		// A file of that name on disk (a restore's) is replaced.
		if err := m.FS.Remove(name); err != nil && !oserrorNotExist(err) {
			return nil, err
		}
		return m.mem.Create(name, c)
	}
	if err := m.onDisk(name); err != nil {
		return nil, err
	}
	return m.FS.Create(name, c)
}

func (m *metaMemFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return m.side(name).Open(name, opts...)
}

func (m *metaMemFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if m.inMem(name) {
		if err := m.mem.MkdirAll(m.dir, 0o755); err != nil {
			return nil, err
		}
	} else if err := m.onDisk(name); err != nil {
		return nil, err
	}
	return m.side(name).OpenReadWrite(name, c, opts...)
}

// Stat finds a directory made lazily in memory when it is not on disk.
func (m *metaMemFS) Stat(name string) (vfs.FileInfo, error) {
	s := m.side(name)
	fi, err := s.Stat(name)
	if err != nil && s == m.FS && oserrorNotExist(err) && m.deferred(name) {
		return m.mem.Stat(name)
	}
	return fi, err
}

// OpenDir opens a directory made lazily in memory when it is not on disk.
func (m *metaMemFS) OpenDir(name string) (vfs.File, error) {
	f, err := m.FS.OpenDir(name)
	if err != nil && oserrorNotExist(err) && m.deferred(name) {
		return m.mem.OpenDir(name)
	}
	return f, err
}

// GetDiskUsage asks about the nearest directory that is on disk.
func (m *metaMemFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	deferred := m.deferred(path)
	for {
		u, err := m.FS.GetDiskUsage(path)
		parent := m.FS.PathDir(path)
		if err == nil || !oserrorNotExist(err) || !deferred || parent == path {
			return u, err
		}
		path = parent
	}
}

func (m *metaMemFS) Remove(name string) error { return m.side(name).Remove(name) }

// RemoveAll removes name on both sides.
func (m *metaMemFS) RemoveAll(name string) error {
	return errors.Join(m.FS.RemoveAll(name), m.mem.RemoveAll(name))
}

// MkdirAll makes dir on disk (in memory only while it is deferred), and
// in memory too when the metadata directory is in it.
func (m *metaMemFS) MkdirAll(dir string, perm os.FileMode) error {
	if m.deferred(dir) {
		return m.mem.MkdirAll(dir, perm)
	}
	if err := m.FS.MkdirAll(dir, perm); err != nil {
		return err
	}
	if m.FS.PathJoin(dir) == m.dir || strings.HasPrefix(m.dir, m.FS.PathJoin(dir)+"/") {
		return m.mem.MkdirAll(dir, perm)
	}
	return nil
}

// List lists dir; the metadata directory's listing, and that of a
// directory made lazily, have both sides.
func (m *metaMemFS) List(dir string) ([]string, error) {
	ls, err := m.FS.List(dir)
	missing := err != nil && oserrorNotExist(err) && m.deferred(dir)
	if (err != nil && !missing) || (m.FS.PathJoin(dir) != m.dir && !m.deferred(dir)) {
		return ls, err
	}
	mem, merr := m.mem.List(dir)
	if missing && merr != nil {
		return nil, merr
	}
	if merr != nil && !oserrorNotExist(merr) {
		return nil, merr
	}
	for _, n := range mem {
		if !slices.Contains(ls, n) {
			ls = append(ls, n)
		}
	}
	return ls, nil
}

// Rename renames within a side, and copies across.
func (m *metaMemFS) Rename(oldname, newname string) error {
	from := m.side(oldname)
	to := m.FS
	if m.inMem(newname) {
		to = m.mem
		if err := m.mem.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
	}
	if to == m.FS {
		if err := m.onDisk(newname); err != nil {
			return err
		}
	}
	if from == to {
		if to == m.mem {
			// The new name may have a file on disk (a restore's): it is
			// replaced.
			if err := m.FS.Remove(newname); err != nil && !oserrorNotExist(err) {
				return err
			}
		}
		return from.Rename(oldname, newname)
	}
	if err := m.copyAcross(from, oldname, to, newname); err != nil {
		return err
	}
	return from.Remove(oldname)
}

// Link links within a side, and copies across.
func (m *metaMemFS) Link(oldname, newname string) error {
	from := m.side(oldname)
	to := m.FS
	if m.inMem(newname) {
		to = m.mem
	} else if err := m.onDisk(newname); err != nil {
		return err
	}
	if from == to {
		return from.Link(oldname, newname)
	}
	return m.copyAcross(from, oldname, to, newname)
}

// ReuseForWrite creates newname afresh: nothing this file system holds is
// worth recycling (logs are off).
func (m *metaMemFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := m.Remove(oldname); err != nil && !oserrorNotExist(err) {
		return nil, err
	}
	return m.Create(newname, c)
}

func (m *metaMemFS) copyAcross(from vfs.FS, oldname string, to vfs.FS, newname string) error {
	src, err := from.Open(oldname)
	if err != nil {
		return err
	}
	defer src.Close()
	if to == vfs.FS(m.mem) {
		// A file of that name on disk (a restore's) would show again
		// once the one in memory is removed.
		if err := m.FS.Remove(newname); err != nil && !oserrorNotExist(err) {
			return err
		}
	}
	dst, err := to.Create(newname, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}

func (m *metaMemFS) Unwrap() vfs.FS { return m.FS }
