package dstl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// DefaultBlockSize is the raw size at which a writer's block is cut.
const DefaultBlockSize = 256 << 10

// writerLog is the pending records of one writer: raw blocks in sequence
// order, the last one open.
type writerLog struct {
	blocks []*rawBlock
	bytes  int // raw bytes of all blocks
	last   uint64
	// noCompress: store the blocks without trying zstd (the writer's
	// recent blocks did not shrink). tried and won count, after encoding,
	// the blocks zstd was tried on and those it made smaller.
	noCompress bool
	tried, won int
}

func (l *writerLog) add(seq uint64, kg int, change []byte, blockSize int) int {
	var b *rawBlock
	if n := len(l.blocks); n > 0 && len(l.blocks[n-1].raw) < blockSize {
		b = l.blocks[n-1]
	} else {
		b = &rawBlock{raw: rawBuffer()}
		l.blocks = append(l.blocks, b)
	}
	before := len(b.raw)
	b.add(seq, kg, change)
	l.last = seq
	d := len(b.raw) - before
	l.bytes += d
	return d
}

func checkWriterID(id string) error {
	if id == "" || len(id) > MaxWriterIDLen {
		return fmt.Errorf("%w: writer id of %d bytes (want 1..%d)", ErrInvalidArgument, len(id), MaxWriterIDLen)
	}
	return nil
}

func checkChange(change []byte) error {
	if len(change) > MaxChangeSize {
		return fmt.Errorf("%w: change of %d bytes exceeds MaxChangeSize (%d)", ErrInvalidArgument, len(change), MaxChangeSize)
	}
	return nil
}

// rawBuffers recycles the raw buffers of blocks the Writer has encoded
// (recycle): each block's buffer grew from nothing by appends, and in a
// changelog-mode daemon under load those growths were half of all the
// bytes it allocated. sync.Pool lets the garbage collector drop idle
// buffers, so the pool holds no memory a quiet writer does not use.
var rawBuffers sync.Pool

// maxRecycled bounds the buffers kept: a block cut at the largest block
// size plus one large record; a larger one (a huge change) is dropped.
const maxRecycled = MaxBlockRawSize

func rawBuffer() []byte {
	if p, ok := rawBuffers.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// recycle hands the raw buffers of an encoded segment's blocks back; the
// caller no longer uses logs.
func recycle(logs map[string]*writerLog) {
	for _, l := range logs {
		for _, b := range l.blocks {
			if c := cap(b.raw); c > 0 && c <= maxRecycled {
				raw := b.raw[:0]
				rawBuffers.Put(&raw)
			}
			b.raw = nil
		}
	}
}

// segBuffers recycles the buffers of segments the Writer uploaded
// (recycleSegment), for the same reason as rawBuffers: one per flush.
var segBuffers sync.Pool

// maxSegRecycled bounds the segment buffers kept.
const maxSegRecycled = 32 << 20

// segBuffer returns an empty buffer of at least n bytes of capacity.
func segBuffer(n int) []byte {
	if p, ok := segBuffers.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

// recycleSegment hands back the buffer of a segment no one reads any more
// (every upload attempt of it returned).
func recycleSegment(data []byte) {
	if c := cap(data); c > 0 && c <= maxSegRecycled {
		data = data[:0]
		segBuffers.Put(&data)
	}
}

// SegmentBuilder assembles one segment from the records of several
// writers. The Writer uses the same encoding; the builder serves tests,
// tools and fuzz seeds. The zero value is not usable: use NewSegmentBuilder.
type SegmentBuilder struct {
	blockSize int
	compress  bool
	writers   map[string]*writerLog
	bytes     int
}

// NewSegmentBuilder returns a builder that cuts blocks at blockSize raw
// bytes (<= 0: DefaultBlockSize) and compresses them with zstd if compress.
func NewSegmentBuilder(blockSize int, compress bool) *SegmentBuilder {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &SegmentBuilder{blockSize: min(blockSize, MaxBlockRawSize/2), compress: compress, writers: map[string]*writerLog{}}
}

// Add appends a record of writer id. Sequence numbers of one writer must
// strictly ascend (from 1).
func (b *SegmentBuilder) Add(id string, seq uint64, kg int, change []byte) error {
	if err := errors.Join(checkWriterID(id), checkKeyGroup(kg), checkChange(change)); err != nil {
		return err
	}
	l := b.writers[id]
	if l == nil {
		l = &writerLog{}
		b.writers[id] = l
	}
	if seq == 0 || seq <= l.last {
		return fmt.Errorf("%w: writer %q: seq %d not after %d", ErrInvalidArgument, id, seq, l.last)
	}
	b.bytes += l.add(seq, kg, change, b.blockSize)
	return nil
}

// Len is the raw size of the records added so far.
func (b *SegmentBuilder) Len() int { return b.bytes }

// Encode returns the segment and its index. The builder can be reused for
// another segment afterwards only through Reset.
func (b *SegmentBuilder) Encode() ([]byte, *Index, error) {
	return encodeSegment(b.writers, b.compress)
}

// Reset forgets every record.
func (b *SegmentBuilder) Reset() { clear(b.writers); b.bytes = 0 }

// encodeSegment writes the header, every writer's blocks (writers in
// ascending id order), the index and the trailer.
func encodeSegment(ws map[string]*writerLog, compress bool) ([]byte, *Index, error) {
	ids := make([]string, 0, len(ws))
	// out's size: the raw records plus each block's framing and zstd's
	// worst case. A block zstd is tried on is written compressed into out
	// first, and one that does not shrink is then stored raw, so out may
	// need the raw size even for compressible logs; the writer counts the
	// raw size as in flight anyway. Sized at half the raw bytes, a segment
	// of incompressible records grew by appends to twice its size.
	size := 0
	for id, l := range ws {
		if len(l.blocks) > 0 {
			ids = append(ids, id)
			size += l.bytes + len(l.blocks)*(blockOverhead+len(id)) + l.bytes/255
		}
	}
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("%w: a segment needs at least one record", ErrInvalidArgument)
	}
	slices.SortFunc(ids, strings.Compare)
	if compress {
		if err := codec.Ready(); err != nil {
			return nil, nil, fmt.Errorf("dstl: %w", err)
		}
	}
	out := segBuffer(HeaderSize + size + TrailerSize + 64*len(ids))
	out = append(out, encodeHeader()...)
	x := &Index{Writers: make([]WriterIndex, 0, len(ids))}
	for _, id := range ids {
		l := ws[id]
		w := WriterIndex{WriterID: id, Blocks: make([]BlockInfo, 0, len(l.blocks))}
		for _, b := range l.blocks {
			off := len(out)
			var smaller bool
			try := compress && !l.noCompress
			out, smaller = appendBlock(out, id, b, try)
			if try {
				l.tried++
				if smaller {
					l.won++
				}
			}
			kmin, _ := kgFromCode(b.kgMin)
			kmax, _ := kgFromCode(b.kgMax)
			w.Blocks = append(w.Blocks, BlockInfo{Offset: int64(off), Length: int64(len(out) - off),
				FirstSeq: b.first, LastSeq: b.last, Records: b.records, KeyGroupMin: kmin, KeyGroupMax: kmax})
		}
		x.Writers = append(x.Writers, w)
	}
	idxOff := len(out)
	idx := encodeIndex(x)
	out = append(out, idx...)
	out = append(out, encodeTrailer(int64(idxOff), len(idx))...)
	return out, x, nil
}

// DecodeSegment verifies a whole segment (header, trailer, index, every
// block's CRC and contents against the index) and calls fn, if not nil,
// for every record, writer after writer in the index's order, each
// writer's records in sequence order. name only labels errors. Damage of
// any kind is an error wrapping ErrCorrupt that names the segment and,
// where it applies, the writer and block; a newer format version wraps
// ErrIncompatible. It never panics on any input. Errors from fn are
// returned unchanged; records reach fn only after their block verified.
func DecodeSegment(name string, data []byte, fn func(writerID string, r Record) error) (*Index, error) {
	if _, err := decodeHeader(data); err != nil {
		return nil, formatErr(name, err)
	}
	if len(data) < HeaderSize+TrailerSize+1 {
		return nil, corruptf(name, "%d bytes is too short for a segment (truncated?)", len(data))
	}
	size := int64(len(data))
	off, n, err := decodeTrailer(data[size-TrailerSize:], size)
	if err != nil {
		return nil, corruptf(name, "%v", err)
	}
	x, err := decodeIndex(data[off:off+n], off)
	if err != nil {
		return nil, formatErr(name, err)
	}
	var d blockDecoder
	for _, w := range x.Writers {
		for i, bl := range w.Blocks {
			if err := d.check(name, w.WriterID, i, bl, data[bl.Offset:bl.Offset+bl.Length], fn); err != nil {
				return nil, err
			}
		}
	}
	return x, nil
}

// check decodes block i of writer id, verifies it against what the index
// says (bl), and delivers its records to fn.
func (d *blockDecoder) check(name, id string, i int, bl BlockInfo, blk []byte, fn func(string, Record) error) error {
	where := func(format string, args ...any) error {
		return corruptf(name, "writer %q block %d at offset %d: %s", id, i, bl.Offset, fmt.Sprintf(format, args...))
	}
	b, err := d.open(blk, id)
	if err != nil {
		return where("%v", err)
	}
	if b.records != bl.Records {
		return where("%d records, the index says %d", b.records, bl.Records)
	}
	var first, last uint64
	kmin, kmax := uint16(noKeyGroupCode), uint16(0)
	var deliver func(Record) error
	if fn != nil {
		deliver = func(r Record) error { return fn(id, r) }
	}
	err = b.walk(where, func(r Record) (bool, error) {
		if first == 0 {
			first = r.Seq
		}
		last = r.Seq
		c := kgCode(r.KeyGroup)
		kmin, kmax = min(kmin, c), max(kmax, c)
		return true, nil
	}, deliver)
	if err != nil {
		return err
	}
	if first != bl.FirstSeq || last != bl.LastSeq || kmin != kgCode(bl.KeyGroupMin) || kmax != kgCode(bl.KeyGroupMax) {
		return where("records span seq %d..%d, key groups %d..%d; the index says %d..%d, %d..%d",
			first, last, kmin, kmax, bl.FirstSeq, bl.LastSeq, bl.KeyGroupMin, bl.KeyGroupMax)
	}
	return nil
}

// formatErr turns a header/index error into ErrIncompatible (newer version)
// or ErrCorrupt.
func formatErr(name string, err error) error {
	if errors.Is(err, errVersion) {
		return fmt.Errorf("%w: segment %s: %v", ErrIncompatible, name, err)
	}
	return corruptf(name, "%v", err)
}
