package lsm

import "github.com/cockroachdb/pebble/v2/vfs"

// noSyncFS is a file system whose files never sync. The first open of a
// restored store (and of the other handles' stores, which are thrown away)
// runs on it: what that session writes (the clipping excises, a new
// MANIFEST) only has to be readable by the second open, which the page
// cache guarantees, not to survive a crash (a restore that crashes starts
// over from the handles; the local directory is never reused). An excise
// then costs no MANIFEST fsync: the clip step is metadata only.
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
