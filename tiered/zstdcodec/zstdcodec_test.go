package zstdcodec_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/tiered/storetest"
	"github.com/statedhq/stated/tiered/zstdcodec"
)

func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Compressible and random data, written in random chunks.
		var data []byte
		for range rapid.IntRange(0, 4).Draw(t, "pieces") {
			if rapid.Bool().Draw(t, "random") {
				data = append(data, storetest.Data(rapid.Uint64().Draw(t, "seed"), rapid.IntRange(0, 20_000).Draw(t, "n"))...)
			} else {
				data = append(data, bytes.Repeat([]byte{rapid.Byte().Draw(t, "b")}, rapid.IntRange(0, 40_000).Draw(t, "n"))...)
			}
		}
		level := zstdcodec.Level(rapid.IntRange(0, 4).Draw(t, "level"))
		var buf bytes.Buffer
		w, err := zstdcodec.NewWriter(&buf, level)
		if err != nil {
			t.Fatal(err)
		}
		for rest := data; len(rest) > 0; {
			n := min(len(rest), rapid.IntRange(1, 30_000).Draw(t, "chunk"))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if w.Uncompressed() != int64(len(data)) {
			t.Fatalf("uncompressed %d, wrote %d", w.Uncompressed(), len(data))
		}
		got, err := zstdcodec.DecompressBytes(buf.Bytes(), int64(len(data)))
		if err != nil {
			t.Fatalf("decompress at the exact limit: %v", err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("round trip of %d bytes returned %d different bytes", len(data), len(got))
		}
		if len(data) > 1 { // a limit of 0 means none
			_, err := zstdcodec.DecompressBytes(buf.Bytes(), int64(len(data))-1)
			if !errors.Is(err, zstdcodec.ErrTooLarge) {
				t.Fatalf("decompress one byte under the limit: %v", err)
			}
		}
	})
}

func TestCompresses(t *testing.T) {
	data := bytes.Repeat([]byte("stated checkpoint "), 10_000)
	c := zstdcodec.CompressBytes(data)
	if len(c) > len(data)/20 {
		t.Fatalf("%d bytes compressed to %d", len(data), len(c))
	}
	if _, err := zstdcodec.NewWriter(io.Discard, 9); err == nil {
		t.Fatal("level 9 accepted")
	}
}

// A bomb (a few KB that decompress to a lot) stops at the limit without
// decompressing everything.
func TestBombBounded(t *testing.T) {
	bomb := zstdcodec.CompressBytes(make([]byte, 64<<20))
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	r, err := zstdcodec.NewReader(bytes.NewReader(bomb), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if !errors.Is(err, zstdcodec.ErrTooLarge) || n != 1<<20 {
		t.Fatalf("bomb: %d bytes, %v", n, err)
	}
}

func TestCorruptAndTruncated(t *testing.T) {
	data := storetest.Data(1, 200_000)
	c := zstdcodec.CompressBytes(data)
	for _, cut := range []int{1, 10, len(c) / 2, len(c) - 1} {
		if _, err := zstdcodec.DecompressBytes(c[:cut], 0); err == nil {
			t.Errorf("stream cut to %d of %d bytes decompressed without error", cut, len(c))
		}
	}
	for _, at := range []int{5, len(c) / 2, len(c) - 2} {
		bad := bytes.Clone(c)
		bad[at] ^= 0x40
		got, err := zstdcodec.DecompressBytes(bad, 0)
		if err == nil && !bytes.Equal(got, data) {
			t.Errorf("flipped byte %d: wrong data without error", at)
		}
	}
	if _, err := zstdcodec.DecompressBytes([]byte("not zstd at all"), 0); !errors.Is(err, zstdcodec.ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	if got, err := zstdcodec.DecompressBytes(zstdcodec.CompressBytes(nil), 10); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
}

func FuzzDecompress(f *testing.F) {
	f.Add(zstdcodec.CompressBytes([]byte("hello")), int64(100))
	f.Add(zstdcodec.CompressBytes(make([]byte, 10_000)), int64(5000))
	f.Add(zstdcodec.CompressBytes(storetest.Data(2, 3000)), int64(0))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff, 0xff}, int64(10))
	f.Fuzz(func(t *testing.T, b []byte, limit int64) {
		limit %= 1 << 20
		got, err := zstdcodec.DecompressBytes(b, limit)
		if err != nil {
			if !errors.Is(err, zstdcodec.ErrCorrupt) && !errors.Is(err, zstdcodec.ErrTooLarge) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		if limit > 0 && int64(len(got)) > limit {
			t.Fatalf("%d bytes past the limit %d", len(got), limit)
		}
	})
}
