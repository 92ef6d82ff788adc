package remotestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/statedhq/stated/tiered"
)

// Storage is a remote.Storage over a tiered.Store. Its methods are safe
// for concurrent use, as Pebble requires.
type Storage struct {
	opts   Options
	closed atomic.Bool
	pre    prefetched // tails kept by Prefetch (prefetch.go)
}

var _ remote.Storage = (*Storage)(nil)

// New returns a Storage over opts.Store.
func New(opts Options) (*Storage, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Storage{opts: opts}, nil
}

// Options returns the options of s, defaults filled in.
func (s *Storage) Options() Options { return s.opts }

// call gives a call without a context of its own its deadline.
func (s *Storage) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.CallTimeout)
}

func (s *Storage) live(op, name string) error {
	if s.closed.Load() {
		return fmt.Errorf("remotestore: %s %s: %w", op, name, tiered.ErrClosed)
	}
	return nil
}

// Close implements remote.Storage. It is idempotent and leaves
// Options.Store open: the caller owns it.
func (s *Storage) Close() error {
	s.closed.Store(true)
	return nil
}

// ReadObject implements remote.Storage: one Stat now (none when
// Options.KnownSize knows the size), one GetRange per ReadAt later.
func (s *Storage) ReadObject(ctx context.Context, objName string) (remote.ObjectReader, int64, error) {
	if err := s.live("read", objName); err != nil {
		return nil, 0, err
	}
	if s.opts.KnownSize != nil {
		if n, ok := s.opts.KnownSize(objName); ok {
			return &reader{s: s, name: objName, size: n}, n, nil
		}
	}
	info, err := s.opts.Store.Stat(ctx, objName)
	if err != nil {
		return nil, 0, fmt.Errorf("remotestore: open %s: %w", objName, err)
	}
	return &reader{s: s, name: objName, size: info.Size}, info.Size, nil
}

// reader reads ranges of one object. The size is the one Stat saw: objects
// are immutable once Pebble has created them, so it cannot change.
type reader struct {
	s    *Storage
	name string
	size int64
}

// ReadAt implements remote.ObjectReader: it reads exactly len(p) bytes or
// fails; ranges past the end fail before any I/O.
func (r *reader) ReadAt(ctx context.Context, p []byte, offset int64) error {
	n := int64(len(p))
	if offset < 0 || offset > r.size || n > r.size-offset {
		return fmt.Errorf("remotestore: read %s [%d, %d) of %d bytes: %w", r.name, offset, offset+n, r.size, ErrShortObject)
	}
	if n == 0 {
		return nil
	}
	if err := r.s.live("read", r.name); err != nil {
		return err
	}
	if r.s.fromTail(r.name, p, offset) {
		return nil
	}
	rc, err := r.s.opts.Store.GetRange(ctx, r.name, offset, n)
	if err != nil {
		return fmt.Errorf("remotestore: read %s [%d, %d): %w", r.name, offset, offset+n, err)
	}
	defer rc.Close()
	if got, err := io.ReadFull(rc, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			// The object shrank under us: it was replaced, which Pebble
			// never does, so say so rather than return short data.
			return fmt.Errorf("remotestore: read %s [%d, %d): got %d bytes: %w", r.name, offset, offset+n, got, ErrShortObject)
		}
		return fmt.Errorf("remotestore: read %s [%d, %d): %w", r.name, offset, offset+n, err)
	}
	return nil
}

// Close implements remote.ObjectReader; it holds nothing open.
func (r *reader) Close() error { return nil }

// CreateObject implements remote.Storage. The object appears, whole, when
// the writer's Close returns nil.
//
// Why spool rather than stream through an io.Pipe into Put: tiered.Store.Put
// takes the size before the first byte (tiered.Bucket refuses a negative
// one, and s3store picks single-part or multipart and the part size from
// it), and Pebble learns an SST's size only when it finishes the file. A
// spool also keeps a failed write from leaving anything in the store.
func (s *Storage) CreateObject(objName string) (io.WriteCloser, error) {
	if err := s.live("create", objName); err != nil {
		return nil, err
	}
	if err := tiered.ValidateName(objName); err != nil {
		return nil, fmt.Errorf("remotestore: create %s: %w", objName, err)
	}
	return &writer{s: s, name: objName}, nil
}

// writer spools an object in memory, then in a temporary file once it
// passes Options.SpoolMemoryBytes.
type writer struct {
	s      *Storage
	name   string
	mu     sync.Mutex
	buf    bytes.Buffer
	file   *os.File
	n      int64
	failed error
	closed bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, fmt.Errorf("remotestore: write %s: %w", w.name, ErrWriterClosed)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if w.file == nil && int64(w.buf.Len()+len(p)) > w.s.opts.SpoolMemoryBytes {
		if err := w.spill(); err != nil {
			w.failed = err
			return 0, err
		}
	}
	var n int
	var err error
	if w.file != nil {
		n, err = w.file.Write(p)
		if err != nil {
			err = fmt.Errorf("remotestore: write %s: spool file %s: %w", w.name, w.file.Name(), err)
		}
	} else {
		n, _ = w.buf.Write(p)
	}
	w.n += int64(n)
	if err != nil {
		w.failed = err
	}
	return n, err
}

// spill moves the buffered bytes into a new temporary file.
func (w *writer) spill() error {
	f, err := os.CreateTemp(w.s.opts.SpoolDir, "remotestore-*.spool")
	if err != nil {
		return fmt.Errorf("remotestore: write %s: spool file: %w", w.name, err)
	}
	w.file = f
	if _, err := f.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("remotestore: write %s: spool file %s: %w", w.name, f.Name(), err)
	}
	w.buf = bytes.Buffer{}
	return nil
}

// Close uploads the spooled bytes, unless a Write failed: then it uploads
// nothing and returns that failure.
func (w *writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("remotestore: close %s: %w", w.name, ErrWriterClosed)
	}
	w.closed = true
	if w.file != nil {
		defer func() {
			w.file.Close()
			os.Remove(w.file.Name())
		}()
	}
	if w.failed != nil {
		return fmt.Errorf("remotestore: create %s: not uploaded: %w", w.name, w.failed)
	}
	if err := w.s.live("create", w.name); err != nil {
		return err
	}
	var r io.Reader = bytes.NewReader(w.buf.Bytes())
	if w.file != nil {
		if _, err := w.file.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("remotestore: create %s: spool file %s: %w", w.name, w.file.Name(), err)
		}
		r = w.file
	}
	ctx, cancel := w.s.call()
	defer cancel()
	if err := w.s.opts.Store.Put(ctx, w.name, r, w.n); err != nil {
		return fmt.Errorf("remotestore: create %s (%d bytes): %w", w.name, w.n, err)
	}
	return nil
}

// List implements remote.Storage with the semantics of the examples in
// remote.Storage's comment: the prefix is cut from each name; with a
// delimiter, one delimiter right after the prefix is cut too (the prefix
// names a "directory"), and a name that still holds the delimiter is cut
// before it, names that share the part before it giving one result. The
// results are sorted (Pebble asks for no order).
//
// Pebble's own in-memory and local-directory Storages return whole names
// and no delimiter support; Pebble itself (objstorageprovider's
// sharedUnref) only counts the results of a List without delimiter, so
// both forms serve it.
func (s *Storage) List(prefix, delimiter string) ([]string, error) {
	if err := s.live("list", prefix); err != nil {
		return nil, err
	}
	ctx, cancel := s.call()
	defer cancel()
	res := []string{}
	err := tiered.Walk(ctx, s.opts.Store, prefix, func(o tiered.ObjectInfo) error {
		rest := strings.TrimPrefix(o.Name, prefix)
		if delimiter != "" {
			rest = strings.TrimPrefix(rest, delimiter)
			if i := strings.Index(rest, delimiter); i >= 0 {
				rest = rest[:i]
				// Walk is in name order, so names of one group are
				// neighbours.
				if len(res) > 0 && res[len(res)-1] == rest {
					return nil
				}
			}
		}
		res = append(res, rest)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remotestore: list %q (delimiter %q): %w", prefix, delimiter, err)
	}
	return res, nil
}

// Delete implements remote.Storage; a missing object is success (Pebble
// tolerates either answer, see objstorageprovider's sharedUnref).
func (s *Storage) Delete(objName string) error {
	if err := s.live("delete", objName); err != nil {
		return err
	}
	ctx, cancel := s.call()
	defer cancel()
	if err := s.opts.Store.Delete(ctx, objName); err != nil {
		return fmt.Errorf("remotestore: delete %s: %w", objName, err)
	}
	return nil
}

// Size implements remote.Storage.
func (s *Storage) Size(objName string) (int64, error) {
	if err := s.live("size", objName); err != nil {
		return 0, err
	}
	ctx, cancel := s.call()
	defer cancel()
	info, err := s.opts.Store.Stat(ctx, objName)
	if err != nil {
		return 0, fmt.Errorf("remotestore: size %s: %w", objName, err)
	}
	return info.Size, nil
}

// IsNotExistError implements remote.Storage: the store's not-found error,
// however wrapped.
func (s *Storage) IsNotExistError(err error) bool { return tiered.IsNotFound(err) }
