package dstl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
		b = &rawBlock{}
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
	raw := 0
	for id, l := range ws {
		if len(l.blocks) > 0 {
			ids = append(ids, id)
			raw += l.bytes
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
	out := make([]byte, 0, HeaderSize+raw/2+TrailerSize+64*len(ids))
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
