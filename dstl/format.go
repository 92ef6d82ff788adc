package dstl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/internal/zstdblock"
)

// Frozen constants of the segment format (see the package doc).
const (
	// Magic starts every segment and ends its trailer.
	Magic = "STCL"
	// IndexMagic is the internal/frame magic of the footer index.
	IndexMagic = "STCI"
	// Version is the format version this build writes; it reads 1..Version.
	Version = 1
	// HeaderSize is the size of the header; the first block starts there.
	HeaderSize = 12
	// TrailerSize is the size of the trailer that ends every segment.
	TrailerSize = 20
	// BlockOverhead is the framing of a block around its payload: the
	// length before it and the CRC32C after it.
	BlockOverhead = 8
	// MaxChangeSize bounds one change (16 MiB): Append refuses more.
	MaxChangeSize = 16 << 20
	// MaxBlockRawSize bounds the uncompressed records of one block (64 MiB);
	// a reader rejects a declared length above it.
	MaxBlockRawSize = 64 << 20
	// MaxWriterIDLen bounds a writer id (bytes).
	MaxWriterIDLen = 1024
	// NoKeyGroup is the key group of a change that belongs to no key group
	// (operator state). It is stored as 0xFFFF.
	NoKeyGroup = -1

	// maxStoredBlock bounds a block's payload: the raw bound plus room for
	// the block header and zstd's framing of incompressible data.
	maxStoredBlock = MaxBlockRawSize + 1<<20
	// noKeyGroupCode is NoKeyGroup on disk.
	noKeyGroupCode = 0xFFFF

	compressionNone = 0
	compressionZstd = 1
)

// errVersion marks an intact header or index of a newer format version.
var errVersion = errors.New("unsupported format version")

func checkKeyGroup(kg int) error {
	if kg == NoKeyGroup || (kg >= 0 && kg < backend.MaxMaxParallelism) {
		return nil
	}
	return fmt.Errorf("%w: key group %d outside [0, %d) and not NoKeyGroup", ErrInvalidArgument, kg, backend.MaxMaxParallelism)
}

func kgCode(kg int) uint16 {
	if kg == NoKeyGroup {
		return noKeyGroupCode
	}
	return uint16(kg)
}

func kgFromCode(c uint16) (int, bool) {
	if c == noKeyGroupCode {
		return NoKeyGroup, true
	}
	return int(c), int(c) < backend.MaxMaxParallelism
}

func encodeHeader() []byte { return encodeHeaderVersion(Version) }

func encodeHeaderVersion(v uint16) []byte {
	b := make([]byte, 0, HeaderSize)
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint16(b, v)
	b = append(b, 0, 0) // reserved
	return binary.LittleEndian.AppendUint32(b, frame.Checksum(b))
}

func decodeHeader(b []byte) (uint16, error) {
	if len(b) < HeaderSize {
		return 0, fmt.Errorf("header of %d bytes, want %d (truncated?)", len(b), HeaderSize)
	}
	b = b[:HeaderSize]
	if string(b[:4]) != Magic {
		return 0, fmt.Errorf("magic %q, want %q (not a changelog segment)", b[:4], Magic)
	}
	if got, want := frame.Checksum(b[:8]), binary.LittleEndian.Uint32(b[8:]); got != want {
		return 0, fmt.Errorf("header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	v := binary.LittleEndian.Uint16(b[4:])
	if v < 1 || v > Version {
		return 0, fmt.Errorf("%w: %d (this build reads 1..%d)", errVersion, v, Version)
	}
	if b[6] != 0 || b[7] != 0 {
		return 0, fmt.Errorf("reserved header bytes %d %d, want 0", b[6], b[7])
	}
	return v, nil
}

func encodeTrailer(indexOffset int64, indexLen int) []byte {
	b := make([]byte, 0, TrailerSize)
	b = binary.LittleEndian.AppendUint64(b, uint64(indexOffset))
	b = binary.LittleEndian.AppendUint32(b, uint32(indexLen))
	b = binary.LittleEndian.AppendUint32(b, frame.Checksum(b))
	return append(b, Magic...)
}

// decodeTrailer checks the trailer of a segment of size bytes and returns
// where its index lies.
func decodeTrailer(b []byte, size int64) (off, n int64, err error) {
	if len(b) != TrailerSize {
		return 0, 0, fmt.Errorf("trailer of %d bytes, want %d (truncated?)", len(b), TrailerSize)
	}
	if string(b[16:]) != Magic {
		return 0, 0, fmt.Errorf("trailer magic %q, want %q (truncated or not a segment)", b[16:], Magic)
	}
	if got, want := frame.Checksum(b[:12]), binary.LittleEndian.Uint32(b[12:]); got != want {
		return 0, 0, fmt.Errorf("trailer checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	o, l := binary.LittleEndian.Uint64(b), int64(binary.LittleEndian.Uint32(b[8:]))
	if o < HeaderSize || l < frame.Overhead || l > frame.MaxPayload+frame.Overhead ||
		o > uint64(size) || int64(o)+l != size-TrailerSize {
		return 0, 0, fmt.Errorf("trailer places the index at %d+%d, which does not end where the %d-byte segment's trailer starts", o, l, size)
	}
	return int64(o), l, nil
}

// rawBlock is the uncompressed records of one block of one writer, with
// what the index says about them.
type rawBlock struct {
	raw          []byte
	records      int
	first, last  uint64
	kgMin, kgMax uint16
}

// add appends one record. The caller guarantees seq > b.last (or an empty
// block) and a valid key group.
func (b *rawBlock) add(seq uint64, kg int, change []byte) {
	c := kgCode(kg)
	if b.records == 0 {
		b.first, b.kgMin, b.kgMax = seq, c, c
	}
	prev := uint64(0)
	if b.records > 0 {
		prev = b.last
	}
	b.raw = binary.AppendUvarint(b.raw, seq-prev)
	b.raw = binary.LittleEndian.AppendUint16(b.raw, c)
	b.raw = binary.AppendUvarint(b.raw, uint64(len(change)))
	b.raw = append(b.raw, change...)
	b.last = seq
	b.records++
	b.kgMin, b.kgMax = min(b.kgMin, c), max(b.kgMax, c)
}

// codec is the process's zstd encoder and decoder for blocks: the fastest
// level, one encoder (a segment is cut on one goroutine).
var codec = zstdblock.New(zstdblock.Options{Level: zstd.SpeedFastest, EncoderConcurrency: 1, MaxRawSize: MaxBlockRawSize})

// compressTo appends the zstd frame of src to dst: codec.Append, a
// variable so that tests can count what is compressed.
var compressTo = codec.Append

// probeSize is the head of a block zstd is tried on first, when the block
// is at least twice as long.
const probeSize = 16 << 10

// blockOverhead bounds a block's framing besides its writer id: payload
// length, compression byte, two uvarints, checksum, and zstd's frame.
const blockOverhead = 4 + 1 + 2*binary.MaxVarintLen64 + 4 + 64

// appendBlock frames b as one block of writer id and appends it to out.
// With compress the records are stored zstd-compressed unless that does not
// make them smaller.
func appendBlock(out []byte, id string, b *rawBlock, compress bool) (_ []byte, compressed bool) {
	start := len(out)
	out = append(out, 0, 0, 0, 0) // payload length, set below
	p := len(out)
	out = append(out, compressionNone)
	out = binary.AppendUvarint(out, uint64(len(id)))
	out = append(out, id...)
	out = binary.AppendUvarint(out, uint64(b.records))
	body := len(out)
	stored := false
	if compress && len(b.raw) >= 2*probeSize {
		// Try zstd on the block's first probeSize bytes before the whole
		// block: a writer's records are alike, so a head that does not
		// shrink means a block that will not, and the probe costs a
		// fraction of compressing a block of random values for nothing.
		trial, err := compressTo(out, b.raw[:probeSize])
		if err == nil {
			// trial may be a grown copy of out: keep its prefix.
			out = trial[:body]
		}
		compress = err == nil && len(trial)-body <= probeSize*3/4
	}
	if compress {
		out[p] = compressionZstd
		var err error
		out, err = compressTo(out, b.raw)
		// Compressed only when zstd saves at least a quarter: a log lives
		// minutes, and a smaller saving is not worth the CPU of the
		// compression and of every replay's decompression.
		stored = err == nil && len(out)-body <= len(b.raw)*3/4
		if !stored {
			out = out[:body]
			out[p] = compressionNone
		}
	}
	if !stored {
		out = append(out, b.raw...)
	}
	binary.LittleEndian.PutUint32(out[start:], uint32(len(out)-p))
	return binary.LittleEndian.AppendUint32(out, frame.Checksum(out[start:])), stored
}

// Record is one change of a writer as the reader delivers it.
type Record struct {
	// Seq is the writer's sequence number of the change (from 1, +1 per
	// Append).
	Seq uint64
	// KeyGroup is the change's key group, or NoKeyGroup.
	KeyGroup int
	// Change is the opaque bytes given to Append. It aliases the reader's
	// buffer: valid only during the callback.
	Change []byte
}

// blockDecoder decodes blocks; its buffer is reused between blocks.
type blockDecoder struct {
	raw []byte
}

// decodedBlock is what a block says about itself once verified.
type decodedBlock struct {
	writerID string
	records  int
	raw      []byte // aliases the decoder's buffer or the block
}

// decode checks one whole block (length, payload, CRC; exactly len(blk)
// bytes) and returns its records' raw bytes. Errors describe the damage;
// the caller adds where.
func (d *blockDecoder) decode(blk []byte) (decodedBlock, error) {
	if len(blk) < BlockOverhead+1 {
		return decodedBlock{}, fmt.Errorf("block of %d bytes is shorter than its framing", len(blk))
	}
	n := binary.LittleEndian.Uint32(blk)
	if int64(n) != int64(len(blk)-BlockOverhead) {
		return decodedBlock{}, fmt.Errorf("block length field %d but %d payload bytes", n, len(blk)-BlockOverhead)
	}
	body := blk[:len(blk)-4]
	if got, want := frame.Checksum(body), binary.LittleEndian.Uint32(blk[len(blk)-4:]); got != want {
		return decodedBlock{}, fmt.Errorf("block checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	p := body[4:]
	code := p[0]
	p = p[1:]
	idLen, k := binary.Uvarint(p)
	if k <= 0 || idLen == 0 || idLen > MaxWriterIDLen || idLen > uint64(len(p)-k) {
		return decodedBlock{}, fmt.Errorf("block writer id length unreadable or out of bounds")
	}
	p = p[k:]
	out := decodedBlock{writerID: string(p[:idLen])}
	p = p[idLen:]
	cnt, k := binary.Uvarint(p)
	if k <= 0 || cnt == 0 || cnt > MaxBlockRawSize {
		return decodedBlock{}, fmt.Errorf("block record count unreadable or out of bounds")
	}
	out.records = int(cnt)
	p = p[k:]
	switch code {
	case compressionNone:
		out.raw = p
	case compressionZstd:
		raw, err := codec.Decode(p, d.raw)
		if err != nil {
			return decodedBlock{}, err
		}
		d.raw = raw
		out.raw = raw
	default:
		return decodedBlock{}, fmt.Errorf("unknown block compression %d", code)
	}
	return out, nil
}

// open decodes blk (decode) and checks that it is a block of writer id.
func (d *blockDecoder) open(blk []byte, id string) (decodedBlock, error) {
	b, err := d.decode(blk)
	if err != nil {
		return decodedBlock{}, err
	}
	if b.writerID != id {
		return decodedBlock{}, fmt.Errorf("block belongs to writer %q", b.writerID)
	}
	return b, nil
}

// walk walks the records of a verified block (each): check sees every
// record first and says whether fn (nil: none) gets it. An error of fn
// comes back as it is; the block's damage and check's errors come back
// through where, which says where the block is.
func (b decodedBlock) walk(where func(string, ...any) error, check func(Record) (deliver bool, err error), fn func(Record) error) error {
	var fnErr error
	err := b.each(func(r Record) error {
		deliver, err := check(r)
		if err != nil || !deliver || fn == nil {
			return err
		}
		fnErr = fn(r)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return where("%v", err)
	}
	return nil
}

// records walks the raw records of a verified block, checking the count,
// that sequence numbers strictly ascend, and every key group.
func (b decodedBlock) each(fn func(Record) error) error {
	p := b.raw
	var prev uint64
	for i := 0; i < b.records; i++ {
		d, k := binary.Uvarint(p)
		if k <= 0 || d == 0 || d > ^uint64(0)-prev {
			return fmt.Errorf("record %d: sequence delta unreadable or not ascending", i)
		}
		p = p[k:]
		seq := prev + d
		if len(p) < 2 {
			return fmt.Errorf("record %d: truncated key group", i)
		}
		kg, ok := kgFromCode(binary.LittleEndian.Uint16(p))
		if !ok {
			return fmt.Errorf("record %d: key group %d out of bounds", i, binary.LittleEndian.Uint16(p))
		}
		p = p[2:]
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return fmt.Errorf("record %d: change length unreadable or past the block's end", i)
		}
		p = p[k:]
		if err := fn(Record{Seq: seq, KeyGroup: kg, Change: p[:n:n]}); err != nil {
			return err
		}
		p = p[n:]
		prev = seq
	}
	if len(p) != 0 {
		return fmt.Errorf("%d bytes after the block's %d records", len(p), b.records)
	}
	return nil
}

// BlockInfo is what the index says about one block.
type BlockInfo struct {
	// Offset and Length locate the block (framing included) in the segment.
	Offset, Length int64
	// FirstSeq and LastSeq are the sequence numbers of its first and last
	// record; Records is how many it holds.
	FirstSeq, LastSeq uint64
	Records           int
	// KeyGroupMin and KeyGroupMax bound its records' key groups (NoKeyGroup
	// counts as 0xFFFF, so a block with an unkeyed record has max 0xFFFF).
	KeyGroupMin, KeyGroupMax int
}

// WriterIndex is the index entry of one writer: its blocks, contiguous
// and in sequence order.
type WriterIndex struct {
	WriterID string
	Blocks   []BlockInfo
}

// Offset is where the writer's first block starts.
func (w WriterIndex) Offset() int64 { return w.Blocks[0].Offset }

// Length is the byte length of all the writer's blocks.
func (w WriterIndex) Length() int64 {
	l := w.Blocks[len(w.Blocks)-1]
	return l.Offset + l.Length - w.Blocks[0].Offset
}

// FirstSeq is the writer's first sequence number in the segment.
func (w WriterIndex) FirstSeq() uint64 { return w.Blocks[0].FirstSeq }

// LastSeq is the writer's last sequence number in the segment.
func (w WriterIndex) LastSeq() uint64 { return w.Blocks[len(w.Blocks)-1].LastSeq }

// Index is a segment's footer index: writers in ascending id order.
type Index struct {
	Writers []WriterIndex
}

// Writer returns the entry of writer id.
func (x *Index) Writer(id string) (WriterIndex, bool) {
	for _, w := range x.Writers {
		if w.WriterID == id {
			return w, true
		}
	}
	return WriterIndex{}, false
}

func encodeIndex(x *Index) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(x.Writers)))
	for _, w := range x.Writers {
		b = binary.AppendUvarint(b, uint64(len(w.WriterID)))
		b = append(b, w.WriterID...)
		b = binary.AppendUvarint(b, uint64(len(w.Blocks)))
		for _, bl := range w.Blocks {
			b = binary.AppendUvarint(b, uint64(bl.Offset))
			b = binary.AppendUvarint(b, uint64(bl.Length))
			b = binary.AppendUvarint(b, bl.FirstSeq)
			b = binary.AppendUvarint(b, bl.LastSeq)
			b = binary.AppendUvarint(b, uint64(bl.Records))
			b = binary.LittleEndian.AppendUint16(b, kgCode(bl.KeyGroupMin))
			b = binary.LittleEndian.AppendUint16(b, kgCode(bl.KeyGroupMax))
		}
	}
	return frame.Encode(IndexMagic, Version, b)
}

// decodeIndex checks the index frame found at indexOffset and that its
// blocks tile [HeaderSize, indexOffset) exactly, writer after writer in
// ascending id order, each writer's blocks in ascending sequence order.
func decodeIndex(data []byte, indexOffset int64) (*Index, error) {
	v, p, err := frame.Decode(IndexMagic, data)
	if err != nil {
		return nil, fmt.Errorf("index: %v", err)
	}
	if v < 1 || v > Version {
		return nil, fmt.Errorf("index %w: %d (this build reads 1..%d)", errVersion, v, Version)
	}
	uv := func(what string) (uint64, error) {
		x, k := binary.Uvarint(p)
		if k <= 0 {
			return 0, fmt.Errorf("index: %s unreadable", what)
		}
		p = p[k:]
		return x, nil
	}
	nw, err := uv("writer count")
	if err != nil {
		return nil, err
	}
	if nw == 0 || nw > uint64(len(p)) {
		return nil, fmt.Errorf("index: writer count %d impossible for %d bytes", nw, len(p))
	}
	x := &Index{Writers: make([]WriterIndex, 0, nw)}
	next := int64(HeaderSize)
	for i := uint64(0); i < nw; i++ {
		idLen, err := uv("writer id length")
		if err != nil {
			return nil, err
		}
		if idLen == 0 || idLen > MaxWriterIDLen || idLen > uint64(len(p)) {
			return nil, fmt.Errorf("index: writer %d: id length %d out of bounds", i, idLen)
		}
		w := WriterIndex{WriterID: string(p[:idLen])}
		p = p[idLen:]
		if i > 0 && x.Writers[i-1].WriterID >= w.WriterID {
			return nil, fmt.Errorf("index: writer %q after %q: ids not strictly ascending", w.WriterID, x.Writers[i-1].WriterID)
		}
		nb, err := uv("block count")
		if err != nil {
			return nil, err
		}
		if nb == 0 || nb > uint64(len(p)) {
			return nil, fmt.Errorf("index: writer %q: block count %d impossible", w.WriterID, nb)
		}
		w.Blocks = make([]BlockInfo, 0, nb)
		var f [5]uint64
		for j := uint64(0); j < nb; j++ {
			for k, what := range [5]string{"offset", "length", "first seq", "last seq", "record count"} {
				if f[k], err = uv(what); err != nil {
					return nil, fmt.Errorf("index: writer %q block %d: %v", w.WriterID, j, err)
				}
			}
			if len(p) < 4 {
				return nil, fmt.Errorf("index: writer %q block %d: truncated key groups", w.WriterID, j)
			}
			kmin, ok1 := kgFromCode(binary.LittleEndian.Uint16(p))
			kmax, ok2 := kgFromCode(binary.LittleEndian.Uint16(p[2:]))
			p = p[4:]
			bl := BlockInfo{Offset: int64(f[0]), Length: int64(f[1]), FirstSeq: f[2], LastSeq: f[3], Records: int(f[4]),
				KeyGroupMin: kmin, KeyGroupMax: kmax}
			switch {
			case f[0] != uint64(next):
				return nil, fmt.Errorf("index: writer %q block %d at offset %d, want %d (blocks must tile the segment)", w.WriterID, j, f[0], next)
			case f[1] <= BlockOverhead || f[1] > maxStoredBlock+BlockOverhead || int64(f[1]) > indexOffset-next:
				return nil, fmt.Errorf("index: writer %q block %d: length %d out of bounds", w.WriterID, j, f[1])
			case f[4] == 0 || f[2] == 0 || f[2] > f[3] || f[3]-f[2] < f[4]-1:
				return nil, fmt.Errorf("index: writer %q block %d: seq %d..%d with %d records is impossible", w.WriterID, j, f[2], f[3], f[4])
			case j > 0 && f[2] <= w.Blocks[j-1].LastSeq:
				return nil, fmt.Errorf("index: writer %q block %d: seq %d not after the previous block's %d", w.WriterID, j, f[2], w.Blocks[j-1].LastSeq)
			case !ok1 || !ok2 || kgCode(kmin) > kgCode(kmax):
				return nil, fmt.Errorf("index: writer %q block %d: key groups %d..%d out of bounds", w.WriterID, j, kmin, kmax)
			}
			next += int64(f[1])
			w.Blocks = append(w.Blocks, bl)
		}
		x.Writers = append(x.Writers, w)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("index: %d bytes after the last writer", len(p))
	}
	if next != indexOffset {
		return nil, fmt.Errorf("index: blocks end at %d but the index starts at %d", next, indexOffset)
	}
	return x, nil
}
