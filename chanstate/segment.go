package chanstate

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
)

// Frozen constants of the segment format (see the package doc). A new
// layout gets a new version; decoders keep reading the old ones.
const (
	// SegmentMagic starts every segment.
	SegmentMagic = "STCS"
	// SegmentVersion is the version EncodeSegment writes.
	SegmentVersion = 1
)

// MaxSegmentBytes bounds an encoded segment: the frame's payload bound plus
// its envelope. Append refuses larger segments and readers refuse ranges
// longer than this, so a corrupt handle can never make a reader allocate
// without bound.
const MaxSegmentBytes = frame.MaxPayload + frame.Overhead

// Record is one serialized record of a channel's in-flight data.
type Record struct {
	// KeyGroup is the record's key group on keyed channels (for an output
	// subpartition: the key group at the receiving operator). It is 0 on
	// forward and broadcast channels.
	KeyGroup int32
	// Data is the record's bytes, opaque to stated.
	Data []byte
}

// Counts returns how many buffers, records and payload bytes buffers hold,
// as backend.ChannelState counts them.
func Counts(buffers [][]Record) (nbuf, nrec, nbytes int64) {
	for _, b := range buffers {
		nrec += int64(len(b))
		for _, r := range b {
			nbytes += int64(len(r.Data))
		}
	}
	return int64(len(buffers)), nrec, nbytes
}

// validateRecords checks that buffers fit kind: key groups not negative on
// keyed channels (the encoder cannot know maxParallelism; the decoder checks
// the upper bound), and 0 elsewhere.
func validateRecords(kind backend.ChannelKind, buffers [][]Record) error {
	for i, b := range buffers {
		for j, r := range b {
			if kind == backend.ChannelKeyed && r.KeyGroup < 0 {
				return fmt.Errorf("buffer %d record %d: negative key group %d", i, j, r.KeyGroup)
			}
			if kind != backend.ChannelKeyed && r.KeyGroup != 0 {
				return fmt.Errorf("buffer %d record %d: key group %d on a %s channel (must be 0)", i, j, r.KeyGroup, kind)
			}
		}
	}
	return nil
}

// SegmentChecksum is the checksum a handle records for an encoded segment
// (backend.ChannelSegment.CRC32C): the CRC32C of its bytes but the last
// four, which is the checksum the segment's frame stores. The CRC32C of a
// whole frame, its stored checksum included, is the CRC's residue, the
// same constant for every frame: it would not tell one segment from
// another, and a handle pointing at another task's or checkpoint's segment
// of the same length would read that segment's records as its own.
func SegmentChecksum(seg []byte) uint32 {
	if len(seg) < frame.Overhead {
		return frame.Checksum(seg)
	}
	return frame.Checksum(seg[:len(seg)-4])
}

// EncodeSegment encodes buffers as one segment. It does not validate the
// records (Writer.Append does); a negative key group is encoded as its
// uint32 bits and refused by the decoder.
func EncodeSegment(buffers [][]Record) []byte {
	n := binary.MaxVarintLen64
	for _, b := range buffers {
		n += binary.MaxVarintLen64
		for _, r := range b {
			n += 2*binary.MaxVarintLen64 + len(r.Data)
		}
	}
	p := make([]byte, 0, n)
	p = binary.AppendUvarint(p, uint64(len(buffers)))
	for _, b := range buffers {
		p = binary.AppendUvarint(p, uint64(len(b)))
		for _, r := range b {
			p = binary.AppendUvarint(p, uint64(uint32(r.KeyGroup)))
			p = binary.AppendUvarint(p, uint64(len(r.Data)))
			p = append(p, r.Data...)
		}
	}
	return frame.Encode(SegmentMagic, SegmentVersion, p)
}

// DecodeSegment decodes a segment of a channel of kind. Key groups of a
// keyed channel must be < maxParallelism, those of other channels 0. The
// records' Data alias data. Every error wraps backend.ErrCorrupt.
func DecodeSegment(data []byte, kind backend.ChannelKind, maxParallelism int) ([][]Record, error) {
	if _, err := backend.ParseChannelKind(string(kind)); err != nil {
		return nil, fmt.Errorf("chanstate: %w", errors.Join(backend.ErrInvalidArgument, err))
	}
	version, p, err := frame.Decode(SegmentMagic, data)
	if err != nil {
		return nil, fmt.Errorf("%w: chanstate segment: %v", backend.ErrCorrupt, err)
	}
	if version != SegmentVersion {
		return nil, fmt.Errorf("%w: chanstate segment version %d (this build reads %d)", backend.ErrCorrupt, version, SegmentVersion)
	}
	d := decoder{p: p}
	// Each buffer takes at least one byte (its count) and each record at
	// least two (key group and length), so bounding counts by the bytes
	// left keeps allocation proportional to the input.
	nbuf := d.count("buffer count", 1)
	var out [][]Record
	if nbuf > 0 {
		out = make([][]Record, 0, min(nbuf, maxPrealloc))
	}
	for i := uint64(0); i < nbuf && d.err == nil; i++ {
		nrec := d.count(fmt.Sprintf("buffer %d record count", i), 2)
		buf := make([]Record, 0, min(nrec, maxPrealloc))
		for j := uint64(0); j < nrec && d.err == nil; j++ {
			kg := d.uvarint("key group")
			if d.err != nil {
				break
			}
			switch {
			case kind == backend.ChannelKeyed && kg >= uint64(max(maxParallelism, 0)):
				d.fail(fmt.Errorf("buffer %d record %d: key group %d outside [0,%d)", i, j, kg, maxParallelism))
			case kind != backend.ChannelKeyed && kg != 0:
				d.fail(fmt.Errorf("buffer %d record %d: key group %d on a %s channel", i, j, kg, kind))
			}
			n := d.count(fmt.Sprintf("buffer %d record %d length", i, j), 1)
			if d.err != nil {
				break
			}
			buf = append(buf, Record{KeyGroup: int32(kg), Data: d.p[:n:n]})
			d.p = d.p[n:]
		}
		out = append(out, buf)
	}
	if d.err == nil && len(d.p) > 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.p)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: chanstate segment: %v", backend.ErrCorrupt, d.err)
	}
	return out, nil
}

// maxPrealloc caps the capacity preallocated from a count: a Record is 32
// bytes for the two it takes to encode, so preallocating a whole claimed
// count could cost 16 times the input before the claim is checked.
const maxPrealloc = 1024

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.fail(fmt.Errorf("%s: bad varint at %d bytes from the end", what, len(d.p)))
		return 0
	}
	d.p = d.p[n:]
	return v
}

// count reads a count of items of at least unit bytes each and checks that
// the remaining bytes can hold them.
func (d *decoder) count(what string, unit uint64) uint64 {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.p))/unit {
		d.fail(fmt.Errorf("%s %d exceeds the %d bytes left", what, v, len(d.p)))
		return 0
	}
	return v
}
