package dstl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/statedhq/stated/backend"
)

// ReadOptions narrow what Read delivers.
type ReadOptions struct {
	// KeyGroups, when not nil, restricts the keyed records delivered to
	// those of this key-group range (rescale replay). Records of other key
	// groups are still read and verified, not delivered.
	KeyGroups *backend.KeyGroupRange
	// DropUnkeyed drops records of NoKeyGroup (operator state, which a
	// rescale redistributes by its own rules).
	DropUnkeyed bool
}

func (o ReadOptions) wants(kg int) bool {
	if kg == NoKeyGroup {
		return !o.DropUnkeyed
	}
	return o.KeyGroups == nil || o.KeyGroups.Contains(kg)
}

// Read streams the records of h's window (From..To) in sequence order to
// fn, one ranged read per Range, filtered by opts. It verifies every block
// it reads (CRC32C, writer id, record encoding), that the ranges and their
// records match what h says, and that every seq of the window is present
// exactly once: a gap, a duplicate or a range that does not hold what h
// says is corruption. Records reach fn only after their block verified; an
// error (which may come after some records were delivered) means the
// caller discards what it received. Change aliases Read's buffer: valid
// only during the call.
//
// Errors: damage wraps ErrCorrupt and names the segment, the range, the
// block and its offset; a missing segment wraps ErrNotFound; errors from
// fn are returned unchanged.
func Read(ctx context.Context, ls LogStore, h Handle, opts ReadOptions, fn func(Record) error) error {
	if err := checkWriterID(h.WriterID); err != nil {
		return err
	}
	if h.Empty() {
		return nil
	}
	if h.From == 0 {
		return corruptf("", "handle of writer %q: window starts at seq 0", h.WriterID)
	}
	if err := checkRanges(h); err != nil {
		return err
	}
	rd := &rangeReader{h: h, opts: opts, fn: fn, next: h.From}
	for i, r := range h.Ranges {
		if rd.next > h.To {
			break
		}
		if err := rd.read(ctx, ls, i, r); err != nil {
			return err
		}
	}
	if rd.next != h.To+1 {
		return corruptf("", "writer %q: the handle's ranges end at seq %d, the window at %d (records missing)", h.WriterID, rd.next-1, h.To)
	}
	return nil
}

// checkRanges validates what the handle says before any I/O.
func checkRanges(h Handle) error {
	if len(h.Ranges) == 0 {
		return corruptf("", "writer %q: window %d..%d has no range", h.WriterID, h.From, h.To)
	}
	for i, r := range h.Ranges {
		bad := func(what string) error {
			return corruptf(r.Segment, "writer %q range %d (%d+%d, seq %d..%d): %s", h.WriterID, i, r.Offset, r.Length, r.FirstSeq, r.LastSeq, what)
		}
		switch {
		case r.Segment == "":
			return bad("no segment name")
		case r.Offset < HeaderSize || r.Length <= BlockOverhead || r.Offset+r.Length > r.SegmentSize-TrailerSize:
			return bad(fmt.Sprintf("byte range outside the %d-byte segment's blocks", r.SegmentSize))
		case r.FirstSeq == 0 || r.FirstSeq > r.LastSeq:
			return bad("empty or reversed seq range")
		case i > 0 && r.FirstSeq <= h.Ranges[i-1].LastSeq:
			return bad("seq range overlaps the previous range's")
		}
	}
	return nil
}

type rangeReader struct {
	h    Handle
	opts ReadOptions
	fn   func(Record) error
	next uint64 // next seq of the window to deliver
	prev uint64 // last seq seen (any)
	dec  blockDecoder
	buf  bytes.Buffer
}

// read streams range i and verifies it block by block.
func (rd *rangeReader) read(ctx context.Context, ls LogStore, i int, r Range) error {
	rc, err := ls.GetRange(ctx, r.Segment, r.Offset, r.Length)
	if err != nil {
		return storeErr(r.Segment, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(io.LimitReader(rc, r.Length), 64<<10)
	var off int64 // within the range
	first, last := uint64(0), uint64(0)
	for blk := 0; off < r.Length; blk++ {
		at := r.Offset + off
		where := func(format string, args ...any) error {
			return corruptf(r.Segment, "writer %q range %d block %d at offset %d: %s", rd.h.WriterID, i, blk, at, fmt.Sprintf(format, args...))
		}
		if r.Length-off < BlockOverhead+1 {
			return where("%d bytes left in the range, too few for a block", r.Length-off)
		}
		var lb [4]byte
		if _, err := io.ReadFull(br, lb[:]); err != nil {
			return rd.readErr(r, where, err)
		}
		n := int64(binary.LittleEndian.Uint32(lb[:]))
		if n == 0 || n > maxStoredBlock || n+BlockOverhead > r.Length-off {
			return where("block length %d does not fit the range's remaining %d bytes", n, r.Length-off)
		}
		rd.buf.Reset()
		rd.buf.Write(lb[:])
		// CopyN grows the buffer only as bytes arrive, so a corrupt length
		// cannot make a huge allocation.
		if _, err := io.CopyN(&rd.buf, br, n+4); err != nil {
			return rd.readErr(r, where, err)
		}
		off += n + BlockOverhead
		b, err := rd.dec.open(rd.buf.Bytes(), rd.h.WriterID)
		if err != nil {
			return where("%v", err)
		}
		err = b.walk(where, func(rec Record) (bool, error) {
			if rec.Seq <= rd.prev {
				return false, fmt.Errorf("seq %d after %d: not ascending", rec.Seq, rd.prev)
			}
			if rec.Seq < r.FirstSeq || rec.Seq > r.LastSeq {
				return false, fmt.Errorf("seq %d outside the range's %d..%d", rec.Seq, r.FirstSeq, r.LastSeq)
			}
			rd.prev = rec.Seq
			if first == 0 {
				first = rec.Seq
			}
			last = rec.Seq
			if rec.Seq < rd.h.From || rec.Seq > rd.h.To {
				return false, nil
			}
			if rec.Seq != rd.next {
				return false, fmt.Errorf("seq %d where %d was due (records missing)", rec.Seq, rd.next)
			}
			rd.next++
			return rd.opts.wants(rec.KeyGroup), nil
		}, rd.fn)
		if err != nil {
			return err
		}
	}
	if first != r.FirstSeq || last != r.LastSeq {
		return corruptf(r.Segment, "writer %q range %d holds seq %d..%d, the handle says %d..%d", rd.h.WriterID, i, first, last, r.FirstSeq, r.LastSeq)
	}
	return nil
}

func (rd *rangeReader) readErr(r Range, where func(string, ...any) error, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return where("range ends early (truncated segment?)")
	}
	return storeErr(r.Segment, err)
}
