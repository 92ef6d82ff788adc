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
type metaMemFS struct {
	vfs.FS
	mem *vfs.MemFS
	dir string // the directory whose metadata lives in memory
}

func newMetaMemFS(disk vfs.FS, dir string) *metaMemFS {
	return &metaMemFS{FS: disk, mem: vfs.NewMem(), dir: disk.PathJoin(dir)}
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
	}
	return m.side(name).OpenReadWrite(name, c, opts...)
}

func (m *metaMemFS) Stat(name string) (vfs.FileInfo, error) { return m.side(name).Stat(name) }

func (m *metaMemFS) Remove(name string) error { return m.side(name).Remove(name) }

// RemoveAll removes name on both sides.
func (m *metaMemFS) RemoveAll(name string) error {
	return errors.Join(m.FS.RemoveAll(name), m.mem.RemoveAll(name))
}

// MkdirAll makes dir on disk, and in memory too when the metadata
// directory is in it.
func (m *metaMemFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := m.FS.MkdirAll(dir, perm); err != nil {
		return err
	}
	if m.FS.PathJoin(dir) == m.dir || strings.HasPrefix(m.dir, m.FS.PathJoin(dir)+"/") {
		return m.mem.MkdirAll(dir, perm)
	}
	return nil
}

// List lists dir; the metadata directory's listing has both sides.
func (m *metaMemFS) List(dir string) ([]string, error) {
	ls, err := m.FS.List(dir)
	if err != nil || m.FS.PathJoin(dir) != m.dir {
		return ls, err
	}
	mem, merr := m.mem.List(dir)
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
