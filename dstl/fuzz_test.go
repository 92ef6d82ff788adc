package dstl

import (
	"context"
	"errors"
	"testing"

	"github.com/statedhq/stated/tiered"
)

// FuzzDecodeSegment feeds arbitrary bytes to DecodeSegment, seeded with
// valid segments (plain and zstd, one and many blocks). It must never
// panic; an error must wrap ErrCorrupt or ErrIncompatible; a success must
// deliver exactly the records the index announces, in ascending sequence
// order per writer.
func FuzzDecodeSegment(f *testing.F) {
	for _, bs := range []int{0, 16} {
		for _, compress := range []bool{false, true} {
			data, _ := buildSegment(f, bs, compress, sampleRecords())
			f.Add(data)
			small, _ := buildSegment(f, bs, compress, []rec{{"w", 1, 0, "a"}, {"w", 3, NoKeyGroup, "bb"}})
			f.Add(small)
		}
	}
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		counts := map[string]int{}
		last := map[string]uint64{}
		x, err := DecodeSegment("fuzz", data, func(id string, r Record) error {
			if r.Seq <= last[id] {
				t.Fatalf("writer %q: seq %d after %d", id, r.Seq, last[id])
			}
			last[id] = r.Seq
			counts[id]++
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("error is neither corruption nor incompatibility: %v", err)
			}
			return
		}
		for _, w := range x.Writers {
			n := 0
			for _, b := range w.Blocks {
				n += b.Records
			}
			if counts[w.WriterID] != n || last[w.WriterID] != w.LastSeq() {
				t.Fatalf("writer %q: %d records up to %d delivered, index says %d up to %d", w.WriterID, counts[w.WriterID], last[w.WriterID], n, w.LastSeq())
			}
		}
	})
}

// FuzzRead feeds Read a damaged segment and a damaged handle range: the
// streaming reader (ranged read, block framing, CopyN) must never panic,
// and fail with ErrCorrupt unless it delivers exactly the window.
func FuzzRead(f *testing.F) {
	recs := []rec{{"w", 1, 3, "one"}, {"w", 2, 4, "two"}, {"x", 1, 0, "x"}, {"w", 3, NoKeyGroup, "three"}}
	for _, compress := range []bool{false, true} {
		data, x := buildSegment(f, 8, compress, recs)
		wi, _ := x.Writer("w")
		f.Add(data, wi.Offset(), wi.Length(), uint64(1), uint64(3))
		f.Add(data, wi.Offset(), wi.Length(), uint64(2), uint64(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, off, length int64, from, to uint64) {
		if len(data) > 1<<16 {
			return
		}
		ctx := context.Background()
		ls, s := memLog()
		if err := tiered.PutBytes(ctx, s, "seg", data); err != nil {
			t.Fatal(err)
		}
		h := Handle{WriterID: "w", From: from, To: to, Ranges: []Range{{Segment: "seg", SegmentSize: int64(len(data)),
			Offset: off, Length: length, FirstSeq: 1, LastSeq: 3}}}
		var n uint64
		err := Read(ctx, ls, h, ReadOptions{}, func(r Record) error {
			if r.Seq != from+n {
				t.Fatalf("record %d has seq %d in window %d..%d", n, r.Seq, from, to)
			}
			n++
			return nil
		})
		switch {
		case err == nil && !h.Empty() && n != to-from+1:
			t.Fatalf("window %d..%d: %d records and no error", from, to, n)
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("error is not corruption: %v", err)
		}
	})
}
