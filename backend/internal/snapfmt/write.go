package snapfmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// DefaultMemoryLimit is how many encoded bytes Write keeps in memory before
// it spills the file to a temporary local file (WriteOptions.MemoryLimit).
const DefaultMemoryLimit = 8 << 20

// WriteOptions tune Write.
type WriteOptions struct {
	// Compression is CompressionNone ("") or CompressionZstd ("zstd").
	Compression string
	// MaxSize, when > 0, bounds the encoded file: a larger snapshot is not
	// stored and Write returns a *TooLargeError with its full size.
	MaxSize int64
	// MemoryLimit is how many encoded bytes are buffered in memory before
	// the rest spills to a temporary file in TempDir (the Store's Put needs
	// the size up front, so the file is staged before it is uploaded).
	// Default DefaultMemoryLimit; < 0 never spills.
	MemoryLimit int64
	// TempDir is where spilled files go. Default os.TempDir().
	TempDir string
}

// TooLargeError is returned by Write when the encoded file exceeds
// WriteOptions.MaxSize.
type TooLargeError struct {
	Path  string
	Size  int64 // the full encoded size
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("snapfmt: snapshot %s would be %d bytes, over the %d-byte limit", e.Path, e.Size, e.Limit)
}

// Write encodes the entries that scan yields into one file of key-group
// range r and stores it under path in store (PutIfAbsent: a name is never
// reused). scan calls fn for every entry in ascending key order; every key
// must lie in r (first two bytes big-endian = its key group). k and v need
// only be valid during the call. The returned FileRef has the file's size,
// CRC32C, compression and key-group offsets; Shared is false.
//
// Write holds one key group's records at a time plus the encoded file up to
// MemoryLimit; beyond that the encoded file is staged in a temporary file
// that Write removes before it returns.
func Write(ctx context.Context, store tiered.Store, path string, r backend.KeyGroupRange,
	scan func(fn func(k, v []byte) error) error, opts WriteOptions) (backend.FileRef, error) {
	if err := backend.ValidatePath(path); err != nil {
		return backend.FileRef{}, fmt.Errorf("snapfmt: write: %w", err)
	}
	if r.Empty() || r.Start < 0 || r.End >= backend.MaxMaxParallelism {
		return backend.FileRef{}, fmt.Errorf("snapfmt: write %s: %w: key-group range %s", path, backend.ErrInvalidArgument, r)
	}
	code, err := compressionCode(opts.Compression)
	if err != nil {
		return backend.FileRef{}, err
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	w := &writer{
		path: path, r: r, code: code, cur: r.Start,
		offsets: make([]int64, 0, r.Len()+1),
		out:     &spool{limit: opts.MemoryLimit, maxSize: opts.MaxSize, dir: opts.TempDir, crc: crc32.New(frame.Table())},
	}
	defer w.out.close()
	if code == compressionZstd {
		if err := codec.Ready(); err != nil {
			return backend.FileRef{}, fmt.Errorf("snapfmt: %w", err)
		}
	}
	if _, err := w.out.Write(encodeHeader(code, r)); err != nil {
		return backend.FileRef{}, err
	}
	w.offsets = append(w.offsets, HeaderSize)
	n := 0
	err = scan(func(k, v []byte) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return w.add(k, v)
	})
	if err != nil {
		return backend.FileRef{}, fmt.Errorf("snapfmt: write %s: %w", path, err)
	}
	if err := w.finishUpTo(r.End); err != nil {
		return backend.FileRef{}, err
	}
	if opts.MaxSize > 0 && w.out.n > opts.MaxSize {
		return backend.FileRef{}, &TooLargeError{Path: path, Size: w.out.n, Limit: opts.MaxSize}
	}
	body, err := w.out.reader()
	if err != nil {
		return backend.FileRef{}, err
	}
	if err := store.PutIfAbsent(ctx, path, body, w.out.n); err != nil {
		return backend.FileRef{}, fmt.Errorf("snapfmt: store %s: %w", path, err)
	}
	return backend.FileRef{
		Path:            path,
		Size:            w.out.n,
		CRC32C:          w.out.crc.Sum32(),
		KeyGroupOffsets: w.offsets,
		Compression:     opts.Compression,
	}, nil
}

type writer struct {
	path    string
	r       backend.KeyGroupRange
	code    byte
	cur     int    // key group whose block is being filled
	block   []byte // raw records of cur
	prev    []byte // last key added (copied), for the ordering check
	hasPrev bool
	scratch []byte
	offsets []int64
	out     *spool
}

func (w *writer) add(k, v []byte) error {
	if len(k) < 2 {
		return fmt.Errorf("key %x has no key group", k)
	}
	kg := int(binary.BigEndian.Uint16(k))
	if !w.r.Contains(kg) {
		return fmt.Errorf("key %x of key group %d lies outside %s", k, kg, w.r)
	}
	if w.hasPrev && bytes.Compare(w.prev, k) >= 0 {
		return fmt.Errorf("keys not strictly ascending: %x after %x", k, w.prev)
	}
	w.prev, w.hasPrev = append(w.prev[:0], k...), true
	if kg > w.cur {
		if err := w.finishUpTo(kg - 1); err != nil {
			return err
		}
	}
	w.block = binary.AppendUvarint(w.block, uint64(len(k)))
	w.block = append(w.block, k...)
	w.block = binary.AppendUvarint(w.block, uint64(len(v)))
	w.block = append(w.block, v...)
	if len(w.block) > MaxBlockRawSize {
		return fmt.Errorf("key group %d holds more than %d bytes, the format's limit per key group", kg, MaxBlockRawSize)
	}
	return nil
}

// finishUpTo writes the block of the current key group and empty blocks up
// to and including key group last, leaving cur = last+1.
func (w *writer) finishUpTo(last int) error {
	for ; w.cur <= last; w.cur++ {
		if len(w.block) > 0 {
			payload := w.block
			if w.code == compressionZstd {
				var err error
				if w.scratch, err = codec.Append(w.scratch[:0], w.block); err != nil {
					return err
				}
				payload = w.scratch
			}
			payload = binary.LittleEndian.AppendUint32(payload, frame.Checksum(payload))
			if _, err := w.out.Write(payload); err != nil {
				return err
			}
			if w.code == compressionZstd {
				w.scratch = payload[:0]
			}
			w.block = w.block[:0]
		}
		w.offsets = append(w.offsets, w.out.n)
	}
	return nil
}

// spool buffers the encoded file in memory up to limit and spills the rest
// to a temporary file; past maxSize it only counts and checksums.
type spool struct {
	limit   int64
	maxSize int64
	dir     string
	mem     bytes.Buffer
	f       *os.File
	n       int64
	crc     hash.Hash32
}

func (s *spool) Write(p []byte) (int, error) {
	s.crc.Write(p)
	s.n += int64(len(p))
	if s.maxSize > 0 && s.n > s.maxSize {
		// The file will be refused; keep counting for the error message
		// but hold nothing.
		s.mem = bytes.Buffer{}
		return len(p), nil
	}
	if s.f == nil && s.limit >= 0 && int64(s.mem.Len()+len(p)) > s.limit {
		if s.dir != "" {
			// An instance's working directory is made when first needed
			// (daemon.OpenEnv.Dir).
			if err := os.MkdirAll(s.dir, 0o700); err != nil {
				return 0, fmt.Errorf("snapfmt: stage snapshot: %w", err)
			}
		}
		f, err := os.CreateTemp(s.dir, "snapfmt-*.tmp")
		if err != nil {
			return 0, fmt.Errorf("snapfmt: stage snapshot: %w", err)
		}
		s.f = f
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			return 0, fmt.Errorf("snapfmt: stage snapshot: %w", err)
		}
		s.mem = bytes.Buffer{}
	}
	if s.f != nil {
		if _, err := s.f.Write(p); err != nil {
			return 0, fmt.Errorf("snapfmt: stage snapshot: %w", err)
		}
		return len(p), nil
	}
	return s.mem.Write(p)
}

func (s *spool) reader() (io.Reader, error) {
	if s.f == nil {
		return bytes.NewReader(s.mem.Bytes()), nil
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("snapfmt: stage snapshot: %w", err)
	}
	return s.f, nil
}

func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
		// A failed remove leaves a temp file for the OS to clean; the
		// snapshot's outcome does not depend on it.
		_ = os.Remove(s.f.Name())
	}
}
