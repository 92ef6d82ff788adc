package localfs

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// Linkable is s whose object files serve as their own local copies
// (tiered.LocalCopies): a restore that needs an object as a local file
// hard-links the store's file instead of copying it (on another file
// system the link falls back to a copy). For a store whose files a
// restore reads whole and often, such as the directory an engine's
// incremental checkpoints live in: a restore of half a GiB from it was
// mostly the copy.
//
// The linked file shares its inode with the object, so the object must
// never be written in place: localfs writes a temporary file and renames
// it, and deleting an object removes only its name. A copy is checked
// against the handle's CRC32C as LocalCopy reads it, so a damaged object
// fails the restore as a download of it would. Objects in pack files
// (Append) have no file of their own; they are read with Get.
func Linkable(s *Store) tiered.Store { return linkable{s} }

type linkable struct{ *Store }

var _ tiered.LocalCopies = linkable{}

// LocalCopy implements tiered.LocalCopies: the object's own file, with
// its size and CRC32C read now (so never a Hit: nothing to check again).
func (l linkable) LocalCopy(ctx context.Context, name string) (tiered.LocalCopy, error) {
	if err := tiered.ValidateName(name); err != nil {
		return tiered.LocalCopy{}, err
	}
	p := l.d.path(name)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		// Packed, or not there: Stat tells which.
		if _, serr := l.Stat(ctx, name); serr != nil {
			return tiered.LocalCopy{}, serr
		}
		return tiered.LocalCopy{}, tiered.ErrNoLocalCopy
	}
	if err != nil {
		return tiered.LocalCopy{}, fmt.Errorf("%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return tiered.LocalCopy{}, tiered.ErrNoLocalCopy
	}
	f, err := os.Open(p)
	if err != nil {
		return tiered.LocalCopy{}, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	crc := crc32.New(frame.Table())
	n, err := io.Copy(crc, ctxReader{ctx: ctx, r: f})
	if err != nil {
		return tiered.LocalCopy{}, fmt.Errorf("%s: read: %w", name, err)
	}
	return tiered.LocalCopy{Path: p, Size: n, CRC32C: crc.Sum32()}, nil
}

// DropLocalCopy implements tiered.LocalCopies. The copy is the object
// itself: nothing is dropped (the next LocalCopy reads the same bytes, and
// the restore fails naming the damage).
func (linkable) DropLocalCopy(string) {}

// ctxReader is r that fails with ctx's error once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

var _ tiered.FilePuts = linkable{}

// PutFile implements tiered.FilePuts: the file is read once (its size and
// CRC32C), synced, and hard-linked as the object (PutIfAbsent: straight to
// the name, so an existing object fails the link; Put: to a temporary name,
// then renamed over), and the directory synced, as Put does. The object
// shares its inode with the file, which the caller never writes again; a
// store not on the operating system's file system, a file on another one,
// or a file system that refuses the link, answers tiered.ErrNotLinked and
// stores nothing.
func (l linkable) PutFile(ctx context.Context, name, path string, ifAbsent bool) (int64, uint32, error) {
	if err := tiered.ValidateName(name); err != nil {
		return 0, 0, err
	}
	d := l.d
	if d.readOnly {
		return 0, 0, errReadOnly
	}
	if d.fs != vfs.Default {
		return 0, 0, tiered.ErrNotLinked
	}
	p := d.path(name)
	if ifAbsent {
		if _, ok, err := d.packs.stat(name); err != nil {
			return 0, 0, err
		} else if ok {
			return 0, 0, tiered.ErrExists
		}
	}
	size, crc, err := syncAndSum(ctx, path)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	if err := d.mkdirAll(filepath.Dir(p)); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	if ifAbsent {
		err = os.Link(path, p)
	} else {
		tmp := d.tempName()
		if err = os.Link(path, tmp); err == nil {
			if err = os.Rename(tmp, p); err != nil {
				os.Remove(tmp)
			}
		}
	}
	switch {
	case errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.ENOTSUP),
		errors.Is(err, syscall.EMLINK):
		// Another file system, one without hard links, or an inode at
		// its link limit: the caller copies instead.
		return 0, 0, tiered.ErrNotLinked
	case ifAbsent && errors.Is(err, fs.ErrExist):
		return 0, 0, tiered.ErrExists
	case err != nil:
		return 0, 0, fmt.Errorf("%s: link %s: %w", name, path, err)
	}
	if err := d.syncDir(filepath.Dir(p)); err != nil {
		return 0, 0, fmt.Errorf("%s: sync directory: %w", name, err)
	}
	// A packed object of the name is now hidden by the file; its frame
	// is dead (as after Put).
	if err := d.packs.removeKnown(name); err != nil {
		return 0, 0, err
	}
	return size, crc, nil
}

// syncAndSum reads the file at path for its size and CRC32C and syncs it.
func syncAndSum(ctx context.Context, path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	crc := crc32.New(frame.Table())
	n, err := io.Copy(crc, ctxReader{ctx: ctx, r: f})
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("sync %s: %w", path, err)
	}
	return n, crc.Sum32(), nil
}
