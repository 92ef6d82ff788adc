package snapfmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// Read decodes the entries of the key groups in want ∩ fileRange from the
// file ref points at (written by Write for fileRange) and calls fn for each,
// in ascending key order. k and v alias Read's buffers: they are valid only
// during the call. A nil fn only verifies.
//
// When want covers fileRange, Read reads the whole file in one stream and
// verifies the header, every block and the file's size and CRC32C against
// ref. Otherwise it reads the header and, with one ranged read, only the
// blocks of the wanted key groups, verifying each. Entries of a block reach
// fn only after that block's CRC has been verified; an error (which may
// come after some blocks were delivered) means the caller must discard
// what it received.
//
// Errors: damage of any kind wraps backend.ErrCorrupt, a missing file
// backend.ErrNotFound (and tiered.ErrNotFound), a newer format version
// backend.ErrIncompatible; each names the file and, where it applies, the
// key group. Errors returned by fn are returned unchanged.
func Read(ctx context.Context, store tiered.Store, ref backend.FileRef, fileRange, want backend.KeyGroupRange,
	fn func(k, v []byte) error) error {
	code, err := checkRef(ref, fileRange)
	if err != nil {
		return err
	}
	in := want.Intersect(fileRange)
	if in.Empty() {
		return nil
	}
	rd := &reader{path: ref.Path, code: code, fn: fn}
	if code == compressionZstd {
		if err := codec.Ready(); err != nil {
			return fmt.Errorf("snapfmt: %w", err)
		}
	}
	if in == fileRange {
		return rd.whole(ctx, store, ref, fileRange)
	}
	return rd.sub(ctx, store, ref, fileRange, in)
}

// Verify reads the whole file and checks everything Read checks.
func Verify(ctx context.Context, store tiered.Store, ref backend.FileRef, fileRange backend.KeyGroupRange) error {
	return Read(ctx, store, ref, fileRange, fileRange, nil)
}

func corruptf(path string, kg int, format string, args ...any) error {
	where := path
	if kg >= 0 {
		where = fmt.Sprintf("%s, key group %d", path, kg)
	}
	return fmt.Errorf("snapfmt: snapshot file %s: %w: %s", where, backend.ErrCorrupt, fmt.Sprintf(format, args...))
}

// checkRef validates what the handle says about the file before any I/O.
func checkRef(ref backend.FileRef, r backend.KeyGroupRange) (byte, error) {
	if err := backend.ValidatePath(ref.Path); err != nil {
		return 0, fmt.Errorf("snapfmt: %w", err)
	}
	if r.Empty() || r.Start < 0 || r.End >= backend.MaxMaxParallelism {
		return 0, corruptf(ref.Path, -1, "key-group range %s is not a valid range", r)
	}
	code, err := compressionCode(ref.Compression)
	if err != nil {
		return 0, corruptf(ref.Path, -1, "unknown compression %q", ref.Compression)
	}
	off := ref.KeyGroupOffsets
	if len(off) != r.Len()+1 {
		return 0, corruptf(ref.Path, -1, "%d key-group offsets for the %d key groups of %s", len(off), r.Len(), r)
	}
	if off[0] != HeaderSize {
		return 0, corruptf(ref.Path, -1, "first block at offset %d, want %d", off[0], HeaderSize)
	}
	for i := 1; i < len(off); i++ {
		n := off[i] - off[i-1]
		if n != 0 && (n <= crcSize || n > maxStoredBlock) {
			return 0, corruptf(ref.Path, r.Start+i-1, "block of %d bytes (offsets %d..%d)", n, off[i-1], off[i])
		}
	}
	if off[len(off)-1] != ref.Size {
		return 0, corruptf(ref.Path, -1, "blocks end at %d but the file has %d bytes", off[len(off)-1], ref.Size)
	}
	return code, nil
}

type reader struct {
	path  string
	code  byte
	fn    func(k, v []byte) error
	block bytes.Buffer
	raw   []byte
}

func (rd *reader) storeErr(op string, err error) error {
	switch {
	case errors.Is(err, tiered.ErrNotFound):
		return fmt.Errorf("snapfmt: snapshot file %s: %w: %w", rd.path, backend.ErrNotFound, err)
	case errors.Is(err, tiered.ErrInvalidRange):
		return corruptf(rd.path, -1, "file is shorter than its key-group offsets say (truncated?): %v", err)
	}
	return fmt.Errorf("snapfmt: %s snapshot file %s: %w", op, rd.path, err)
}

func (rd *reader) header(b []byte, ref backend.FileRef, r backend.KeyGroupRange) error {
	h, err := decodeHeader(b)
	if errors.Is(err, errVersion) {
		return fmt.Errorf("snapfmt: snapshot file %s: %w: %v", rd.path, backend.ErrIncompatible, err)
	}
	if err != nil {
		return corruptf(rd.path, -1, "%v", err)
	}
	if h.r != r || h.compression != rd.code {
		return corruptf(rd.path, -1, "header says key groups %s, compression %d; the handle says %s, %q",
			h.r, h.compression, r, ref.Compression)
	}
	return nil
}

// readBlock reads n bytes of stream into rd.block. The buffer grows only
// as bytes arrive, so offsets claiming a huge block cost nothing unless the
// bytes are really there.
func (rd *reader) readBlock(stream io.Reader, n int64, kg int) ([]byte, error) {
	rd.block.Reset()
	got, err := io.CopyN(&rd.block, stream, n)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf(rd.path, kg, "block truncated: %d of %d bytes", got, n)
		}
		return nil, rd.storeErr("read", err)
	}
	return rd.block.Bytes(), nil
}

// whole streams the entire file, checking its size and CRC32C at the end.
func (rd *reader) whole(ctx context.Context, store tiered.Store, ref backend.FileRef, r backend.KeyGroupRange) error {
	rc, err := store.Get(ctx, ref.Path)
	if err != nil {
		return rd.storeErr("open", err)
	}
	defer rc.Close()
	crc := crc32.New(frame.Table())
	stream := io.TeeReader(rc, crc)
	var hb [HeaderSize]byte
	if n, err := io.ReadFull(stream, hb[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return corruptf(rd.path, -1, "file of %d bytes has no complete header (truncated)", n)
		}
		return rd.storeErr("read", err)
	}
	if err := rd.header(hb[:], ref, r); err != nil {
		return err
	}
	off := ref.KeyGroupOffsets
	for i := 0; i < r.Len(); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		kg := r.Start + i
		b, err := rd.readBlock(stream, off[i+1]-off[i], kg)
		if err != nil {
			return err
		}
		if err := rd.decode(kg, b); err != nil {
			return err
		}
	}
	var extra [1]byte
	if n, err := io.ReadFull(stream, extra[:]); n > 0 {
		return corruptf(rd.path, -1, "bytes after the last block (the handle says %d bytes)", ref.Size)
	} else if !errors.Is(err, io.EOF) {
		return rd.storeErr("read", err)
	}
	if got := crc.Sum32(); got != ref.CRC32C {
		return corruptf(rd.path, -1, "file checksum mismatch (handle %08x, computed %08x)", ref.CRC32C, got)
	}
	return nil
}

// sub reads the header and then the blocks of key groups in (a sub-range
// of r) with one ranged read.
func (rd *reader) sub(ctx context.Context, store tiered.Store, ref backend.FileRef, r, in backend.KeyGroupRange) error {
	hb, err := rd.readRange(ctx, store, 0, HeaderSize, -1)
	if err != nil {
		return err
	}
	if err := rd.header(hb, ref, r); err != nil {
		return err
	}
	off := ref.KeyGroupOffsets
	a, b := in.Start-r.Start, in.End-r.Start
	length := off[b+1] - off[a]
	if length == 0 {
		return nil // every wanted key group is empty
	}
	rc, err := store.GetRange(ctx, ref.Path, off[a], length)
	if err != nil {
		return rd.storeErr("open", err)
	}
	defer rc.Close()
	for i := a; i <= b; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		kg := r.Start + i
		blk, err := rd.readBlock(rc, off[i+1]-off[i], kg)
		if err != nil {
			return err
		}
		if err := rd.decode(kg, blk); err != nil {
			return err
		}
	}
	return nil
}

func (rd *reader) readRange(ctx context.Context, store tiered.Store, offset, n int64, kg int) ([]byte, error) {
	rc, err := store.GetRange(ctx, rd.path, offset, n)
	if err != nil {
		return nil, rd.storeErr("open", err)
	}
	defer rc.Close()
	b, err := rd.readBlock(rc, n, kg)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// decode verifies one stored block of key group kg and hands its records
// to fn.
func (rd *reader) decode(kg int, block []byte) error {
	if len(block) == 0 {
		return nil
	}
	if len(block) <= crcSize {
		return corruptf(rd.path, kg, "block of %d bytes", len(block))
	}
	payload := block[:len(block)-crcSize]
	if got, want := frame.Checksum(payload), binary.LittleEndian.Uint32(block[len(payload):]); got != want {
		return corruptf(rd.path, kg, "block checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	records := payload
	if rd.code == compressionZstd {
		raw, err := codec.Decode(payload, rd.raw)
		if err != nil {
			return corruptf(rd.path, kg, "%v", err)
		}
		rd.raw = raw
		records = raw
	}
	return rd.records(kg, records)
}

func (rd *reader) records(kg int, p []byte) error {
	var prev []byte
	for len(p) > 0 {
		k, rest, ok := field(p)
		if !ok {
			return corruptf(rd.path, kg, "bad key length")
		}
		v, rest, ok := field(rest)
		if !ok {
			return corruptf(rd.path, kg, "bad value length after key %x", k)
		}
		p = rest
		if len(k) < 2 || int(binary.BigEndian.Uint16(k)) != kg {
			return corruptf(rd.path, kg, "key %x does not belong to the block's key group", k)
		}
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return corruptf(rd.path, kg, "key %x does not sort after %x", k, prev)
		}
		prev = k
		if rd.fn != nil {
			if err := rd.fn(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// field reads uvarint(len) | bytes, bounded by what p holds.
func field(p []byte) (x, rest []byte, ok bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, false
	}
	return p[w : w+int(n)], p[w+int(n):], true
}
