package lsm

import (
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// noSyncFS is a file system whose files never sync. Every Pebble store an
// instance opens runs on it (pebbleOptions): the live one, restored
// stores' first opens and the temporary stores of other handles. What they
// write only has to be readable later in the same process, which the page
// cache guarantees, not to survive a crash: after a crash nothing local is
// reused (Open clears the instance's directory and restores from the
// checkpoint store, whose own writes are synced), and the WAL is off. A
// restore's clip step is then metadata only, and an empty instance opens
// without the dozen fsyncs of a new Pebble store.
type noSyncFS struct{ vfs.FS }

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                       { return nil }
func (noSyncFile) SyncData() error                   { return nil }
func (noSyncFile) SyncTo(length int64) (bool, error) { return true, nil }

func wrapNoSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.Create(name, c))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.ReuseForWrite(oldname, newname, c))
}

// Lock takes no lock and creates no LOCK file. Every store on this file
// system lives in a directory that belongs to one backend: Open clears the
// instance's directory before it creates anything, and the daemon's lock
// on its data dir keeps other processes out. Pebble's LOCK file would
// guard nothing and cost a file creation per instance, which on ext4 is
// what opening thousands of idle instances spends its time on (see
// openFresh).
func (noSyncFS) Lock(string) (io.Closer, error) { return noLock{}, nil }

type noLock struct{}

func (noLock) Close() error { return nil }
