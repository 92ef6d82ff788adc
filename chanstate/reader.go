package chanstate

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// AddSegment appends seg, which Append returned for buffers, to cs and adds
// the buffers' counts: the bookkeeping a task's handle needs.
func AddSegment(cs *backend.ChannelState, seg backend.ChannelSegment, buffers [][]Record) {
	nb, nr, nbytes := Counts(buffers)
	cs.Segments = append(cs.Segments, seg)
	cs.Buffers += nb
	cs.Records += nr
	cs.Bytes += nbytes
}

// ReadChannel reads cs's segments in order and calls fn for each buffer. Each
// segment is one ranged read whose length and CRC32C are checked before it
// is decoded; memory holds one segment at a time. fn may keep the buffers.
//
// A missing object, a short read, a checksum mismatch or a decoding error
// returns an error wrapping backend.ErrCorrupt that names the object, the
// range and the channel. Other store errors (I/O, ctx) are returned wrapped
// as they are, and fn's errors unchanged.
func ReadChannel(ctx context.Context, store tiered.Store, cs backend.ChannelState, maxParallelism int, fn func(buffer []Record) error) error {
	_, err := readChannel(ctx, store, cs, maxParallelism, func(buffers [][]Record) error {
		for _, b := range buffers {
			if err := fn(b); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// readChannel calls fn with each segment's buffers and returns the counts
// it read.
func readChannel(ctx context.Context, store tiered.Store, cs backend.ChannelState, maxParallelism int, fn func([][]Record) error) (got backend.ChannelState, err error) {
	for i, s := range cs.Segments {
		buffers, err := readSegment(ctx, store, cs, i, maxParallelism)
		if err != nil {
			return got, err
		}
		AddSegment(&got, s, buffers)
		if err := fn(buffers); err != nil {
			return got, err
		}
	}
	return got, nil
}

func readSegment(ctx context.Context, store tiered.Store, cs backend.ChannelState, i int, maxParallelism int) ([][]Record, error) {
	s := cs.Segments[i]
	where := fmt.Sprintf("channel %s (%s) segment %d: object %s range [%d,+%d)", cs.Channel, cs.Kind, i, s.Path, s.Offset, s.Length)
	if s.Offset < 0 || s.Length <= 0 || s.Length > MaxSegmentBytes {
		return nil, fmt.Errorf("%w: chanstate: %s: not a segment range (length at most %d)", backend.ErrCorrupt, where, MaxSegmentBytes)
	}
	rc, err := store.GetRange(ctx, s.Path, s.Offset, s.Length)
	switch {
	case tiered.IsNotFound(err):
		return nil, fmt.Errorf("%w: chanstate: %s: object missing: %w", backend.ErrCorrupt, where, err)
	case errors.Is(err, tiered.ErrInvalidRange):
		return nil, fmt.Errorf("%w: chanstate: %s: range starts past the object's end: %w", backend.ErrCorrupt, where, err)
	case err != nil:
		return nil, fmt.Errorf("chanstate: %s: %w", where, err)
	}
	buf := make([]byte, s.Length)
	n, err := io.ReadFull(rc, buf)
	// One byte more than asked means the store ignored the range: refuse
	// rather than decode something else.
	var extra [1]byte
	if err == nil {
		if m, _ := rc.Read(extra[:]); m > 0 {
			err = errors.New("store returned more bytes than the range")
		}
	}
	_ = rc.Close()
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: chanstate: %s: short read, %d bytes", backend.ErrCorrupt, where, n)
	case err != nil:
		return nil, fmt.Errorf("chanstate: %s: %w", where, err)
	}
	if got := SegmentChecksum(buf); got != s.CRC32C {
		return nil, fmt.Errorf("%w: chanstate: %s: checksum mismatch (handle %08x, read %08x)", backend.ErrCorrupt, where, s.CRC32C, got)
	}
	buffers, err := DecodeSegment(buf, cs.Kind, maxParallelism)
	if err != nil {
		return nil, fmt.Errorf("chanstate: %s: %w", where, err)
	}
	return buffers, nil
}
