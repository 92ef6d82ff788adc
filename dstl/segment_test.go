package dstl

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
)

type rec struct {
	id  string
	seq uint64
	kg  int
	ch  string
}

func buildSegment(t testing.TB, blockSize int, compress bool, recs []rec) ([]byte, *Index) {
	t.Helper()
	b := NewSegmentBuilder(blockSize, compress)
	for _, r := range recs {
		if err := b.Add(r.id, r.seq, r.kg, []byte(r.ch)); err != nil {
			t.Fatal(err)
		}
	}
	data, x, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return data, x
}

func decodeAll(t testing.TB, data []byte) ([]rec, *Index, error) {
	var got []rec
	x, err := DecodeSegment("seg", data, func(id string, r Record) error {
		got = append(got, rec{id, r.Seq, r.KeyGroup, string(r.Change)})
		return nil
	})
	return got, x, err
}

func sampleRecords() []rec {
	var recs []rec
	for i := 1; i <= 40; i++ {
		recs = append(recs, rec{"b-writer", uint64(i * 2), i % 7, strings.Repeat("x", i*13)})
		recs = append(recs, rec{"a-writer", uint64(i), (i * 5) % 128, fmt.Sprintf("change-%d", i)})
	}
	recs = append(recs, rec{"c", 1, NoKeyGroup, ""}, rec{"c", 9, backend.MaxMaxParallelism - 1, "last"})
	return recs
}

// byWriter orders recs as DecodeSegment delivers them: writers ascending,
// each writer's records in the order added.
func byWriter(recs []rec) []rec {
	var ids []string
	seen := map[string]bool{}
	for _, r := range recs {
		if !seen[r.id] {
			seen[r.id] = true
			ids = append(ids, r.id)
		}
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	var out []rec
	for _, id := range ids {
		for _, r := range recs {
			if r.id == id {
				out = append(out, r)
			}
		}
	}
	return out
}

func TestSegmentRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name      string
		blockSize int
		compress  bool
	}{
		{"one block per writer", 0, false},
		{"one block per writer zstd", 0, true},
		{"tiny blocks", 64, false},
		{"tiny blocks zstd", 64, true},
		{"one record per block", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := sampleRecords()
			data, x := buildSegment(t, tc.blockSize, tc.compress, recs)
			got, dx, err := decodeAll(t, data)
			if err != nil {
				t.Fatal(err)
			}
			want := byWriter(recs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("decoded records differ:\n got %v\nwant %v", got, want)
			}
			if fmt.Sprint(dx) != fmt.Sprint(x) {
				t.Fatalf("decoded index %v, encoder said %v", dx, x)
			}
			if len(x.Writers) != 3 || x.Writers[0].WriterID != "a-writer" {
				t.Fatalf("index writers %v", x.Writers)
			}
			a, _ := x.Writer("a-writer")
			if a.FirstSeq() != 1 || a.LastSeq() != 40 || a.Offset() != HeaderSize {
				t.Fatalf("writer a: seq %d..%d offset %d", a.FirstSeq(), a.LastSeq(), a.Offset())
			}
			b, _ := x.Writer("b-writer")
			if b.Offset() != a.Offset()+a.Length() {
				t.Fatalf("writer b starts at %d, a ends at %d", b.Offset(), a.Offset()+a.Length())
			}
			c, _ := x.Writer("c")
			if len(c.Blocks) == 1 && (c.Blocks[0].KeyGroupMin != backend.MaxMaxParallelism-1 || c.Blocks[0].KeyGroupMax != NoKeyGroup) {
				t.Fatalf("writer c key groups %+v", c.Blocks)
			}
			if tc.blockSize == 1 && len(a.Blocks) != 40 {
				t.Fatalf("block size 1: %d blocks for 40 records", len(a.Blocks))
			}
		})
	}
}

func TestCompressionShrinks(t *testing.T) {
	recs := []rec{}
	for i := 1; i <= 200; i++ {
		recs = append(recs, rec{"w", uint64(i), 1, strings.Repeat("compressible ", 20)})
	}
	plain, _ := buildSegment(t, 0, false, recs)
	z, _ := buildSegment(t, 0, true, recs)
	if len(z)*4 > len(plain) {
		t.Fatalf("zstd segment %d bytes, plain %d: compression not applied", len(z), len(plain))
	}
}

func TestBuilderRejects(t *testing.T) {
	b := NewSegmentBuilder(0, false)
	for _, tc := range []struct {
		name string
		id   string
		seq  uint64
		kg   int
		ch   []byte
	}{
		{"empty id", "", 1, 0, nil},
		{"long id", strings.Repeat("i", MaxWriterIDLen+1), 1, 0, nil},
		{"seq zero", "w", 0, 0, nil},
		{"key group too big", "w", 1, backend.MaxMaxParallelism, nil},
		{"key group negative", "w", 1, -2, nil},
		{"change too large", "w", 1, 0, make([]byte, MaxChangeSize+1)},
	} {
		if err := b.Add(tc.id, tc.seq, tc.kg, tc.ch); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if err := b.Add("w", 5, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Add("w", 5, 0, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("repeated seq: %v", err)
	}
	b.Reset()
	if _, _, err := b.Encode(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty segment: %v", err)
	}
}

// Every single-bit flip and every truncation of a segment is detected as
// corruption, and the message names what failed.
func TestEveryBitFlipAndTruncationIsDetected(t *testing.T) {
	for _, compress := range []bool{false, true} {
		data, _ := buildSegment(t, 40, compress, []rec{{"a", 1, 3, "one"}, {"a", 2, 4, "two"}, {"a", 5, NoKeyGroup, "five"}, {"b", 7, 0, "seven"}})
		for i := 0; i < len(data)*8; i++ {
			bad := bytes.Clone(data)
			bad[i/8] ^= 1 << (i % 8)
			_, _, err := decodeAll(t, bad)
			if !errors.Is(err, ErrCorrupt) || !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("compress=%v: flip of bit %d (byte %d) not detected: %v", compress, i, i/8, err)
			}
			if !strings.Contains(err.Error(), "segment seg") {
				t.Fatalf("error does not name the segment: %v", err)
			}
		}
		for n := 0; n < len(data); n++ {
			if _, _, err := decodeAll(t, data[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("truncation to %d bytes not detected: %v", n, err)
			}
		}
	}
}

func TestCorruptionNamesTheBlockAndChecksum(t *testing.T) {
	data, x := buildSegment(t, 0, false, []rec{{"a", 1, 3, "one"}, {"b", 1, 4, "two"}})
	b, _ := x.Writer("b")
	bad := bytes.Clone(data)
	bad[b.Offset()+6] ^= 0xFF // inside b's payload
	_, _, err := decodeAll(t, bad)
	for _, want := range []string{`writer "b" block 0`, fmt.Sprintf("offset %d", b.Offset()), "block checksum mismatch"} {
		if !strings.Contains(fmt.Sprint(err), want) {
			t.Fatalf("error %v does not say %q", err, want)
		}
	}
}

func TestNewerVersionIsIncompatible(t *testing.T) {
	data, _ := buildSegment(t, 0, false, []rec{{"a", 1, 3, "one"}})
	bad := bytes.Clone(data)
	copy(bad, encodeHeaderVersion(Version+1)) // intact header (valid CRC) of a newer version
	if _, _, err := decodeAll(t, bad); !errors.Is(err, ErrIncompatible) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("newer version: %v, want ErrIncompatible", err)
	}
}

// A block spliced in from another writer (valid CRC) is caught by the
// writer-id check.
func TestBlockOfAnotherWriterIsDetected(t *testing.T) {
	data, x := buildSegment(t, 0, false, []rec{{"aa", 1, 3, "one"}, {"ab", 1, 3, "one"}})
	a, _ := x.Writer("aa")
	b, _ := x.Writer("ab")
	bad := bytes.Clone(data)
	copy(bad[a.Offset():a.Offset()+a.Length()], data[b.Offset():b.Offset()+b.Length()])
	if _, _, err := decodeAll(t, bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `belongs to writer "ab"`) {
		t.Fatalf("spliced block: %v", err)
	}
}

// TestCompressionProbesTheHead: zstd is tried on a long block's first
// probeSize bytes before the whole block; a block whose head does not
// shrink is stored raw without compressing the rest, a compressible one
// is compressed whole, a short one is tried whole. Every segment reads
// back identically.
func TestCompressionProbesTheHead(t *testing.T) {
	var fed int
	defer func(f func([]byte, []byte) ([]byte, error)) { compressTo = f }(compressTo)
	orig := compressTo
	compressTo = func(dst, src []byte) ([]byte, error) {
		fed += len(src)
		return orig(dst, src)
	}
	r := rand.New(rand.NewPCG(3, 4))
	random := func(n int) string {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return string(p)
	}
	records := func(n, size int, gen func(int) string) []rec {
		var recs []rec
		for i := 1; i <= n; i++ {
			recs = append(recs, rec{"w", uint64(i), i % 16, gen(size)})
		}
		return recs
	}
	for _, tc := range []struct {
		name     string
		recs     []rec
		fed      func(raw int) int // bytes zstd must be handed
		stored   byte
		maxRatio float64
	}{
		{"random long block", records(600, 200, random), func(int) int { return probeSize }, compressionNone, 1.1},
		{"compressible long block", records(600, 200, func(n int) string { return strings.Repeat("z", n) }),
			func(raw int) int { return probeSize + raw }, compressionZstd, 0.1},
		{"random short block", records(50, 200, random), func(raw int) int { return raw }, compressionNone, 1.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fed = 0
			b := NewSegmentBuilder(1<<20, true)
			for _, rc := range tc.recs {
				if err := b.Add(rc.id, rc.seq, rc.kg, []byte(rc.ch)); err != nil {
					t.Fatal(err)
				}
			}
			raw := b.Len()
			data, x, err := b.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.fed(raw); fed != want {
				t.Fatalf("zstd was handed %d bytes of a %d-byte block, want %d", fed, raw, want)
			}
			w, _ := x.Writer("w")
			if len(w.Blocks) != 1 {
				t.Fatalf("%d blocks, want 1", len(w.Blocks))
			}
			bl := w.Blocks[0]
			if c := data[bl.Offset+4]; c != tc.stored {
				t.Fatalf("block stored with compression %d, want %d", c, tc.stored)
			}
			if ratio := float64(bl.Length) / float64(raw); ratio > tc.maxRatio {
				t.Fatalf("block of %d raw bytes stored in %d", raw, bl.Length)
			}
			got, _, err := decodeAll(t, data)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.recs) {
				t.Fatal("records read back differ from those added")
			}
		})
	}
}
