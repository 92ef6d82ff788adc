// Package vfsfile adapts the files of a Pebble vfs.FS to what the local
// stores (tiered/localfs, tiered/cache) hand to their readers: a file whose
// second Close is a no-op, and a section of one that closes it.
package vfsfile

import (
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Once is a file opened for reading whose second Close is a no-op, as for
// an *os.File (a vfs.MemFS file panics on it).
type Once struct {
	vfs.File
	closed atomic.Bool
}

// NewOnce wraps f.
func NewOnce(f vfs.File) *Once { return &Once{File: f} }

// Close closes the file the first time.
func (f *Once) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	return f.File.Close()
}

// WriteTo lets io.Copy reach the *os.File's own WriteTo on the default FS
// (copy_file_range, sendfile).
func (f *Once) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := f.File.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{f.File})
}

// Section reads length bytes of f from offset and closes f with it.
func Section(f io.ReaderAt, c io.Closer, offset, length int64) io.ReadCloser {
	return section{io.NewSectionReader(f, offset, length), c}
}

type section struct {
	*io.SectionReader
	c io.Closer
}

func (s section) Close() error { return s.c.Close() }
