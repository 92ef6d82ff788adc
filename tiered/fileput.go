package tiered

import (
	"context"
	"errors"
)

// ErrNotLinked is returned by FilePuts.PutFile for a file the store cannot
// link (on another file system, or a store on a file system of its own):
// put it with Put instead.
var ErrNotLinked = errors.New("cannot link the file into the store")

// FilePuts is an optional interface of a Store whose objects are files on
// the operating system's file system (localfs.Linkable): PutFile stores a
// local file as an object by hard-linking it, so the upload of a file that
// is never written again (an engine's table in a checkpoint) costs one read
// for its checksum instead of a copy. Reach it with AsFilePuts, which sees
// through WithPrefix views; the Store interface does not include it because
// only a local directory can link.
type FilePuts interface {
	// PutFile stores the file at path (an operating-system path; the file
	// is never written again) as object name, as Put (ifAbsent false) or
	// PutIfAbsent (true, ErrExists when name exists) would, and returns
	// the size and CRC32C (Castagnoli, internal/frame's table) of its
	// bytes. The file is synced before it is linked, so the object is as
	// durable when PutFile returns as after a Put. ErrNotLinked: nothing
	// was stored; the caller puts the file's bytes with Put.
	PutFile(ctx context.Context, name, path string, ifAbsent bool) (size int64, crc uint32, err error)
}

// AsFilePuts returns s's FilePuts, seen through WithPrefix views (not
// through a wrapper that counts requests: a store wrapped so streams).
func AsFilePuts(s Store) (FilePuts, bool) {
	return asThroughPrefix(s, AsFilePuts, func(base FilePuts, p *prefixed) FilePuts {
		return prefixedFilePuts{base: base, p: p}
	})
}

type prefixedFilePuts struct {
	base FilePuts
	p    *prefixed
}

func (f prefixedFilePuts) PutFile(ctx context.Context, name, path string, ifAbsent bool) (int64, uint32, error) {
	n, err := f.p.full(name)
	if err != nil {
		return 0, 0, err
	}
	return f.base.PutFile(ctx, n, path, ifAbsent)
}
