package dstl

import (
	"errors"
	"testing"
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
