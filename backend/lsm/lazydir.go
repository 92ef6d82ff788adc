package lsm

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lazyDirFS is the instance's file system as Pebble sees it, with
// directories opened only while they are synced. Pebble keeps every
// directory it may sync open for the life of a store (the data directory
// several times over): four of the seven descriptors an idle instance
// held, on a host that may run thousands of instances. A sync now opens
// the directory, syncs it and closes it again; nothing else is done with a
// directory handle.
type lazyDirFS struct{ vfs.FS }

// OpenDir checks that name can be opened, as the real OpenDir does, and
// returns a handle that holds no descriptor.
func (fs lazyDirFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &lazyDir{fs: fs.FS, name: name}, nil
}

// lazyDir is a directory handle that opens the directory for each sync.
type lazyDir struct {
	fs   vfs.FS
	name string
}

var errDirIO = errors.New("lsm: read or write of a directory handle")

func (d *lazyDir) Close() error                          { return nil }
func (d *lazyDir) Read([]byte) (int, error)              { return 0, errDirIO }
func (d *lazyDir) ReadAt([]byte, int64) (int, error)     { return 0, errDirIO }
func (d *lazyDir) Write([]byte) (int, error)             { return 0, errDirIO }
func (d *lazyDir) WriteAt([]byte, int64) (int, error)    { return 0, errDirIO }
func (d *lazyDir) Preallocate(int64, int64) error        { return nil }
func (d *lazyDir) Stat() (vfs.FileInfo, error)           { return d.fs.Stat(d.name) }
func (d *lazyDir) SyncTo(int64) (fullSync bool, _ error) { return false, nil } // a no-op for directories
func (d *lazyDir) SyncData() error                       { return d.Sync() }
func (d *lazyDir) Prefetch(offset, length int64) error   { return nil }
func (d *lazyDir) Fd() uintptr                           { return vfs.InvalidFd }

// Sync opens the directory, syncs it and closes it.
func (d *lazyDir) Sync() error {
	f, err := d.fs.OpenDir(d.name)
	if err != nil {
		return fmt.Errorf("lsm: sync directory %s: %w", d.name, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
