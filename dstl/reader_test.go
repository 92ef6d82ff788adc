package dstl

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// persistedHandle writes 3 segments for writer "w" (and some of "x") and
// returns the handle of all of w's records.
func persistedHandle(t *testing.T) (LogStore, tiered.Store, Handle) {
	t.Helper()
	ctx := context.Background()
	ls, s := memLog()
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour, BlockSize: 32})
	for seg := 0; seg < 3; seg++ {
		for i := 0; i < 5; i++ {
			w.Append(ctx, "w", i, []byte(strings.Repeat("v", 20)))
			w.Append(ctx, "x", i, []byte("other"))
		}
		if _, err := w.Persist(ctx, "w", math.MaxUint64); err != nil {
			t.Fatal(err)
		}
	}
	h, err := w.Persist(ctx, "w", math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ranges) != 3 || h.To != 15 {
		t.Fatalf("handle %+v", h)
	}
	return ls, s, h
}

func cloneHandle(h Handle) Handle {
	h.Ranges = append([]Range(nil), h.Ranges...)
	return h
}

func TestReadDetectsBadHandles(t *testing.T) {
	ls, _, h := persistedHandle(t)
	if got, err := readAll(ls, h, ReadOptions{}); err != nil || len(got) != 15 {
		t.Fatalf("intact handle: %d records, %v", len(got), err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Handle)
		want   string
	}{
		{"range dropped (gap)", func(h *Handle) { h.Ranges = append(h.Ranges[:1], h.Ranges[2:]...) }, "where"},
		{"last range dropped", func(h *Handle) { h.Ranges = h.Ranges[:2] }, "records missing"},
		{"ranges swapped", func(h *Handle) { h.Ranges[0], h.Ranges[1] = h.Ranges[1], h.Ranges[0] }, "overlaps"},
		{"length cut inside a block", func(h *Handle) { h.Ranges[1].Length -= 3 }, "range"},
		{"offset shifted", func(h *Handle) { h.Ranges[1].Offset += 1; h.Ranges[1].Length -= 1 }, "block"},
		{"offset of writer x", func(h *Handle) { h.Ranges[0].Offset = h.Ranges[0].Offset + h.Ranges[0].Length }, "belongs to writer"},
		{"seq range lies", func(h *Handle) { h.Ranges[2].LastSeq++ }, "the handle says"},
		{"window past the ranges", func(h *Handle) { h.To++ }, "records missing"},
		{"wrong writer id", func(h *Handle) { h.WriterID = "x" }, "belongs to writer"},
		{"range past the segment", func(h *Handle) { h.Ranges[2].Length = h.Ranges[2].SegmentSize }, "outside"},
		{"window from zero", func(h *Handle) { h.From = 0 }, "seq 0"},
		{"no ranges", func(h *Handle) { h.Ranges = nil }, "no range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := cloneHandle(h)
			tc.mutate(&bad)
			_, err := readAll(ls, bad, ReadOptions{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want corruption saying %q", err, tc.want)
			}
		})
	}
}

func TestReadDetectsDamagedSegments(t *testing.T) {
	ctx := context.Background()
	ls, s, h := persistedHandle(t)
	r := h.Ranges[1]
	data, err := tiered.ReadAll(ctx, s, r.Segment, 0)
	if err != nil {
		t.Fatal(err)
	}
	// every bit of w's blocks in segment 2
	for i := r.Offset * 8; i < (r.Offset+r.Length)*8; i++ {
		bad := bytes.Clone(data)
		bad[i/8] ^= 1 << (i % 8)
		tiered.PutBytes(ctx, s, r.Segment, bad)
		_, err := readAll(ls, h, ReadOptions{})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), r.Segment) {
			t.Fatalf("flip of bit %d of the range not detected: %v", i-r.Offset*8, err)
		}
	}
	bad := bytes.Clone(data)
	bad[r.Offset+6] ^= 0x40
	tiered.PutBytes(ctx, s, r.Segment, bad)
	_, err = readAll(ls, h, ReadOptions{})
	if !strings.Contains(err.Error(), "range 1 block 0 at offset") || !strings.Contains(err.Error(), "block checksum mismatch") {
		t.Fatalf("damage not named precisely: %v", err)
	}
	tiered.PutBytes(ctx, s, r.Segment, data[:r.Offset+r.Length-2])
	if _, err := readAll(ls, h, ReadOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated segment: %v", err)
	}
	s.Delete(ctx, r.Segment)
	if _, err := readAll(ls, h, ReadOptions{}); !errors.Is(err, ErrNotFound) || !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing segment: %v", err)
	}
}

func TestReadStopsOnCallbackError(t *testing.T) {
	ls, _, h := persistedHandle(t)
	stop := errors.New("stop")
	n := 0
	err := Read(context.Background(), ls, h, ReadOptions{}, func(Record) error {
		n++
		if n == 7 {
			return stop
		}
		return nil
	})
	if err != stop || n != 7 {
		t.Fatalf("callback error: %v after %d records", err, n)
	}
}
