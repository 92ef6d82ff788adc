package snapfmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

type entry struct{ k, v []byte }

func key(kg int, rest string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(kg)), rest...)
}

func scanOf(es []entry) func(fn func(k, v []byte) error) error {
	return func(fn func(k, v []byte) error) error {
		for _, e := range es {
			if err := fn(e.k, e.v); err != nil {
				return err
			}
		}
		return nil
	}
}

func readAll(s tiered.Store, ref backend.FileRef, r, want backend.KeyGroupRange) ([]entry, error) {
	var out []entry
	err := Read(context.Background(), s, ref, r, want, func(k, v []byte) error {
		out = append(out, entry{bytes.Clone(k), bytes.Clone(v)})
		return nil
	})
	return out, err
}

func filter(es []entry, r backend.KeyGroupRange) []entry {
	var out []entry
	for _, e := range es {
		if r.Contains(int(binary.BigEndian.Uint16(e.k))) {
			out = append(out, e)
		}
	}
	return out
}

func equal(a, b []entry) bool {
	return slices.EqualFunc(a, b, func(x, y entry) bool { return bytes.Equal(x.k, y.k) && bytes.Equal(x.v, y.v) })
}

func sample() []entry {
	return []entry{
		{key(3, "a"), []byte("1")},
		{key(3, "b"), nil},
		{key(5, ""), []byte(strings.Repeat("x", 300))},
		{key(7, "zz"), []byte("last")},
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	r := backend.KeyGroupRange{Start: 2, End: 8}
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		t.Run("compression="+comp, func(t *testing.T) {
			s := memstore.New()
			es := sample()
			ref, err := Write(ctx, s, "job/chk-1/op-0/state-x", r, scanOf(es), WriteOptions{Compression: comp})
			if err != nil {
				t.Fatal(err)
			}
			if ref.Compression != comp || ref.Shared || len(ref.KeyGroupOffsets) != r.Len()+1 {
				t.Fatalf("ref = %+v", ref)
			}
			info, err := s.Stat(ctx, ref.Path)
			if err != nil || info.Size != ref.Size {
				t.Fatalf("stat = %+v, %v; ref size %d", info, err, ref.Size)
			}
			got, err := readAll(s, ref, r, r)
			if err != nil || !equal(got, es) {
				t.Fatalf("whole read = %v, %v", got, err)
			}
			for _, want := range []backend.KeyGroupRange{{Start: 3, End: 3}, {Start: 4, End: 6}, {Start: 0, End: 4}, {Start: 8, End: 20}, {Start: 4, End: 4}} {
				got, err := readAll(s, ref, r, want)
				if err != nil || !equal(got, filter(es, want)) {
					t.Fatalf("read %s = %v, %v", want, got, err)
				}
			}
			if err := Verify(ctx, s, ref, r); err != nil {
				t.Fatal(err)
			}
			// Writing the same path again never replaces the file.
			if _, err := Write(ctx, s, ref.Path, r, scanOf(nil), WriteOptions{}); !errors.Is(err, tiered.ErrExists) {
				t.Fatalf("rewrite: %v", err)
			}
		})
	}
}

func TestEmptyFile(t *testing.T) {
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 0, End: 127}
	ref, err := Write(context.Background(), s, "e", r, scanOf(nil), WriteOptions{Compression: CompressionZstd})
	if err != nil {
		t.Fatal(err)
	}
	if ref.Size != HeaderSize {
		t.Fatalf("empty file of %d bytes", ref.Size)
	}
	if got, err := readAll(s, ref, r, backend.KeyGroupRange{Start: 5, End: 9}); err != nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 2, End: 4}
	for name, es := range map[string][]entry{
		"unsorted":     {{key(3, "b"), nil}, {key(3, "a"), nil}},
		"duplicate":    {{key(3, "a"), nil}, {key(3, "a"), nil}},
		"out of range": {{key(5, "a"), nil}},
		"below range":  {{key(1, "a"), nil}},
		"short key":    {{[]byte{0}, nil}},
	} {
		if _, err := Write(ctx, s, "bad-"+strings.ReplaceAll(name, " ", "-"), r, scanOf(es), WriteOptions{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Write(ctx, s, "../x", r, scanOf(nil), WriteOptions{}); err == nil {
		t.Error("bad path accepted")
	}
	if _, err := Write(ctx, s, "x", r, scanOf(nil), WriteOptions{Compression: "lz4"}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("bad compression: %v", err)
	}
	if _, err := Write(ctx, s, "x", backend.EmptyKeyGroupRange, scanOf(nil), WriteOptions{}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("empty range: %v", err)
	}
	if s.Bytes() != 0 {
		t.Errorf("failed writes stored %d bytes", s.Bytes())
	}
}

func TestTooLarge(t *testing.T) {
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 0, End: 9}
	_, err := Write(context.Background(), s, "big", r, scanOf(sample()[:3]), WriteOptions{MaxSize: 100})
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 100 || tl.Size <= 300 {
		t.Fatalf("err = %v", err)
	}
	ref, err := Write(context.Background(), s, "big", r, scanOf(sample()[:3]), WriteOptions{MaxSize: tl.Size})
	if err != nil || ref.Size != tl.Size {
		t.Fatalf("at the limit: %v %+v (too-large said %d)", err, ref, tl.Size)
	}
}

func TestSpillToTempFile(t *testing.T) {
	dir := t.TempDir()
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 0, End: 15}
	var es []entry
	for kg := 0; kg < 16; kg++ {
		for i := 0; i < 50; i++ {
			es = append(es, entry{key(kg, fmt.Sprintf("k%03d", i)), bytes.Repeat([]byte{byte(i)}, 100)})
		}
	}
	ref, err := Write(context.Background(), s, "spill", r, scanOf(es), WriteOptions{MemoryLimit: 1000, TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(s, ref, r, r); err != nil || !equal(got, es) {
		t.Fatalf("read back: %d entries, %v", len(got), err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// put stores data under the ref's path, replacing the file.
func put(t interface {
	Helper()
	Fatal(...any)
}, s tiered.Store, path string, data []byte) {
	t.Helper()
	if err := tiered.PutBytes(context.Background(), s, path, data); err != nil {
		t.Fatal(err)
	}
}

func TestEveryBitFlipAndTruncationIsCaught(t *testing.T) {
	ctx := context.Background()
	r := backend.KeyGroupRange{Start: 2, End: 8}
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		s := memstore.New()
		ref, err := Write(ctx, s, "f", r, scanOf(sample()), WriteOptions{Compression: comp})
		if err != nil {
			t.Fatal(err)
		}
		orig, err := tiered.ReadAll(ctx, s, "f", 0)
		if err != nil {
			t.Fatal(err)
		}
		for bit := 0; bit < len(orig)*8; bit++ {
			bad := bytes.Clone(orig)
			bad[bit/8] ^= 1 << (bit % 8)
			put(t, s, "f", bad)
			err := Verify(ctx, s, ref, r)
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "snapshot file f") {
				t.Fatalf("%s: bit %d flipped: %v", comp, bit, err)
			}
			// A sub-range read catches every flip in the header or in
			// the blocks it reads.
			kg := r.Start
			for i := 1; i < len(ref.KeyGroupOffsets); i++ {
				if int64(bit/8) < ref.KeyGroupOffsets[i] {
					break
				}
				kg++
			}
			if kg <= r.End {
				want := backend.KeyGroupRange{Start: kg, End: kg}
				if _, err := readAll(s, ref, r, want); !errors.Is(err, backend.ErrCorrupt) {
					t.Fatalf("%s: bit %d flipped, sub-range %s: %v", comp, bit, want, err)
				}
			}
		}
		for n := 0; n < len(orig); n++ {
			put(t, s, "f", orig[:n])
			if err := Verify(ctx, s, ref, r); !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("%s: truncated to %d: %v", comp, n, err)
			}
		}
		put(t, s, "f", append(bytes.Clone(orig), 0))
		if err := Verify(ctx, s, ref, r); !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("%s: extended: %v", comp, err)
		}
		// Truncation in the last block is caught by a sub-range read too.
		put(t, s, "f", orig[:len(orig)-1])
		last := backend.KeyGroupRange{Start: 7, End: 8}
		if _, err := readAll(s, ref, r, last); !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "key group 7") {
			t.Fatalf("%s: truncated, sub-range: %v", comp, err)
		}
		put(t, s, "f", orig[:ref.KeyGroupOffsets[1]])
		if _, err := readAll(s, ref, r, last); !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("%s: cut before the wanted blocks: %v", comp, err)
		}
	}
}

func TestMissingFileAndBadRef(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 2, End: 8}
	ref, err := Write(ctx, s, "f", r, scanOf(sample()), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	missing := ref
	missing.Path = "gone"
	for _, want := range []backend.KeyGroupRange{r, {Start: 3, End: 3}} {
		err := Read(ctx, s, missing, r, want, nil)
		if !errors.Is(err, backend.ErrNotFound) || !errors.Is(err, tiered.ErrNotFound) || !strings.Contains(err.Error(), "gone") {
			t.Fatalf("missing file: %v", err)
		}
	}
	mutate := map[string]func(*backend.FileRef){
		"crc":             func(f *backend.FileRef) { f.CRC32C++ },
		"size":            func(f *backend.FileRef) { f.Size++ },
		"offsets short":   func(f *backend.FileRef) { f.KeyGroupOffsets = f.KeyGroupOffsets[1:] },
		"first offset":    func(f *backend.FileRef) { f.KeyGroupOffsets[0] = 0 },
		"shifted offsets": func(f *backend.FileRef) { f.KeyGroupOffsets[2]-- },
		"compression":     func(f *backend.FileRef) { f.Compression = "zstd" },
		"unknown comp":    func(f *backend.FileRef) { f.Compression = "lz4" },
	}
	for name, m := range mutate {
		bad := ref
		bad.KeyGroupOffsets = slices.Clone(ref.KeyGroupOffsets)
		m(&bad)
		if err := Verify(ctx, s, bad, r); !errors.Is(err, backend.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The file of another range never decodes as this one.
	if err := Verify(ctx, s, ref, backend.KeyGroupRange{Start: 3, End: 9}); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("wrong range: %v", err)
	}
}

func TestNewerVersionIsIncompatible(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	r := backend.KeyGroupRange{Start: 0, End: 0}
	ref, err := Write(ctx, s, "f", r, scanOf(nil), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := encodeHeader(compressionNone, r)
	binary.LittleEndian.PutUint16(h[4:], Version+1)
	h = append(h[:12], 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(h[12:], crcOf(h[:12]))
	put(t, s, "f", h)
	ref.CRC32C = crcOf(h)
	if err := Verify(ctx, s, ref, r); !errors.Is(err, backend.ErrIncompatible) {
		t.Fatalf("newer version: %v", err)
	}
}

func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		start := rapid.IntRange(0, backend.MaxMaxParallelism-1).Draw(t, "start")
		n := rapid.IntRange(1, 20).Draw(t, "len")
		r := backend.KeyGroupRange{Start: start, End: min(start+n-1, backend.MaxMaxParallelism-1)}
		keys := rapid.SliceOfDistinct(rapid.Custom(func(t *rapid.T) string {
			kg := rapid.IntRange(r.Start, r.End).Draw(t, "kg")
			return string(key(kg, rapid.StringN(0, 6, -1).Draw(t, "k")))
		}), func(s string) string { return s }).Draw(t, "keys")
		slices.Sort(keys)
		es := make([]entry, len(keys))
		for i, k := range keys {
			es[i] = entry{[]byte(k), rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "v")}
		}
		comp := rapid.SampledFrom([]string{CompressionNone, CompressionZstd}).Draw(t, "compression")
		s := memstore.New()
		ref, err := Write(ctx, s, "p", r, scanOf(es), WriteOptions{Compression: comp})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := readAll(s, ref, r, r); err != nil || !equal(got, es) {
			t.Fatalf("whole read: %v (%d of %d entries)", err, len(got), len(es))
		}
		ws := rapid.IntRange(r.Start-2, r.End+2).Draw(t, "wantStart")
		want := backend.KeyGroupRange{Start: ws, End: rapid.IntRange(ws, r.End+3).Draw(t, "wantEnd")}
		if got, err := readAll(s, ref, r, want); err != nil || !equal(got, filter(es, want)) {
			t.Fatalf("read %s: %v", want, err)
		}
		orig, _ := tiered.ReadAll(ctx, s, "p", 0)
		bad := bytes.Clone(orig)
		bit := rapid.IntRange(0, len(orig)*8-1).Draw(t, "bit")
		bad[bit/8] ^= 1 << (bit % 8)
		put(t, s, "p", bad)
		if err := Verify(ctx, s, ref, r); !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("bit %d flipped: %v", bit, err)
		}
		put(t, s, "p", orig[:rapid.IntRange(0, len(orig)-1).Draw(t, "cut")])
		if err := Verify(ctx, s, ref, r); !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("truncated: %v", err)
		}
	})
}
