package dstl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// LogStore is where segments live. It is deliberately small so that a
// raft-replicated log can implement it later; TieredLogStore implements it
// over any tiered.Store (a local directory, S3, the checkpoint store or a
// separate --changelog-store).
//
// Contract:
//   - Names are clean relative slash-separated object names; the Writer
//     makes them unique by construction (see the package doc), so a name
//     is never put twice with different bytes.
//   - Put is atomic: once it returns nil the segment is durable and
//     readers see all of it; a failed or cancelled Put leaves nothing or
//     the whole segment. Putting the same bytes again is harmless.
//   - GetRange opens length bytes from offset (length < 0: to the end); a
//     missing segment is an error wrapping tiered.ErrNotFound. The caller
//     closes the reader.
//   - Delete of missing segments succeeds; a failure may have deleted a
//     part, and calling it again finishes the job.
//   - List calls fn for every segment under prefix in name order.
//   - All methods are safe for concurrent use and honour ctx.
type LogStore interface {
	Put(ctx context.Context, name string, data []byte) error
	GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error)
	Delete(ctx context.Context, names ...string) error
	List(ctx context.Context, prefix string, fn func(name string, size int64) error) error
}

// TieredLogStore is a LogStore over a tiered.Store. It does not own the
// store: closing is the caller's business.
type TieredLogStore struct {
	Store tiered.Store
}

var _ LogStore = TieredLogStore{}

// Put stores data under name: appended to the store's log file when it
// keeps one (tiered.Appender: a local directory), as an object of its own
// otherwise.
func (s TieredLogStore) Put(ctx context.Context, name string, data []byte) error {
	return tiered.AppendOrPut(ctx, s.Store, name, data)
}

// GetRange opens a byte range of a segment.
func (s TieredLogStore) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return s.Store.GetRange(ctx, name, offset, length)
}

// Delete removes segments; missing ones are success.
func (s TieredLogStore) Delete(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	return s.Store.DeleteBatch(ctx, names)
}

// List walks the segments under prefix.
func (s TieredLogStore) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	return tiered.Walk(ctx, s.Store, prefix, func(o tiered.ObjectInfo) error { return fn(o.Name, o.Size) })
}

// ReadIndex reads the footer index of the segment name of size bytes with
// two ranged reads (trailer, then index), verifying both. It lets a reader
// without a Handle (a sweep, a verification tool) find each writer's byte
// range.
func ReadIndex(ctx context.Context, ls LogStore, name string, size int64) (*Index, error) {
	if size < HeaderSize+TrailerSize+frame.Overhead {
		return nil, corruptf(name, "size %d is too small for a segment", size)
	}
	tr, err := readRange(ctx, ls, name, size-TrailerSize, TrailerSize)
	if err != nil {
		return nil, err
	}
	off, n, err := decodeTrailer(tr, size)
	if err != nil {
		return nil, corruptf(name, "%v", err)
	}
	idx, err := readRange(ctx, ls, name, off, n)
	if err != nil {
		return nil, err
	}
	x, err := decodeIndex(idx, off)
	if err != nil {
		return nil, formatErr(name, err)
	}
	return x, nil
}

// readRange reads exactly n bytes at off of a segment.
func readRange(ctx context.Context, ls LogStore, name string, off, n int64) ([]byte, error) {
	rc, err := ls.GetRange(ctx, name, off, n)
	if err != nil {
		return nil, storeErr(name, err)
	}
	defer rc.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, corruptf(name, "range %d+%d ends early (truncated segment?)", off, n)
		}
		return nil, storeErr(name, err)
	}
	return b, nil
}

// storeErr classifies an error of the log store.
func storeErr(name string, err error) error {
	switch {
	case errors.Is(err, tiered.ErrNotFound):
		return fmt.Errorf("%w: segment %s: %w", ErrNotFound, name, err)
	case errors.Is(err, tiered.ErrInvalidRange):
		return corruptf(name, "segment is shorter than its handle says (truncated?): %v", err)
	}
	return fmt.Errorf("dstl: read segment %s: %w", name, err)
}

// ParseSegmentName splits a segment name of a Writer with Options.Prefix
// prefix ("<prefix>/<run id>/<counter:016x>-<attempt>") into its run id
// and counter. ok is false for any other name.
func ParseSegmentName(prefix, name string) (run string, counter uint64, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"/")
	if !found {
		return "", 0, false
	}
	run, seg, found := strings.Cut(rest, "/")
	if !found || run == "" {
		return "", 0, false
	}
	hex, attempt, found := strings.Cut(seg, "-")
	if !found || len(hex) != 16 || attempt == "" {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(attempt, 10, 31); err != nil {
		return "", 0, false
	}
	counter, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return "", 0, false
	}
	return run, counter, true
}
