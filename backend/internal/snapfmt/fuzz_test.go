package snapfmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered/memstore"
)

func crcOf(b []byte) uint32 { return frame.Checksum(b) }

// encodeOffsets turns offsets into the fuzz input's list of block sizes.
func encodeOffsets(off []int64) []byte {
	var b []byte
	for i := 1; i < len(off); i++ {
		b = binary.AppendUvarint(b, uint64(off[i]-off[i-1]))
	}
	return b
}

// FuzzRead feeds arbitrary files to Read. The FileRef is derived from the
// input (block sizes from sizes, range from the header when there is one,
// the whole file's size and CRC from the bytes), so the whole-file checks
// pass and the fuzzer reaches the header and block decoders. With fixCRC
// the target also rewrites the header and block CRCs to match, so the
// record and zstd decoders see arbitrary bytes. Read must never panic and
// either fail with ErrCorrupt/ErrIncompatible or deliver sorted entries of
// the wanted key groups.
func FuzzRead(f *testing.F) {
	ctx := context.Background()
	r := backend.KeyGroupRange{Start: 2, End: 8}
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		s := memstore.New()
		ref, err := Write(ctx, s, "f", r, scanOf(sample()), WriteOptions{Compression: comp})
		if err != nil {
			f.Fatal(err)
		}
		data, _ := s.Get(ctx, "f")
		var buf bytes.Buffer
		buf.ReadFrom(data)
		for _, fix := range []bool{false, true} {
			f.Add(buf.Bytes(), encodeOffsets(ref.KeyGroupOffsets), fix, uint8(0), uint8(0))
			f.Add(buf.Bytes(), encodeOffsets(ref.KeyGroupOffsets), fix, uint8(3), uint8(2))
		}
	}
	f.Fuzz(func(t *testing.T, data, sizes []byte, fixCRC bool, wantFrom, wantLen uint8) {
		if len(data) > 1<<16 {
			return
		}
		fr := backend.KeyGroupRange{Start: 0, End: 0}
		compression := CompressionNone
		if len(data) >= HeaderSize {
			fr.Start = int(binary.LittleEndian.Uint16(data[8:]))
			fr.End = int(binary.LittleEndian.Uint16(data[10:]))
			if data[6] == compressionZstd {
				compression = CompressionZstd
			}
		}
		if fr.Empty() || fr.End >= backend.MaxMaxParallelism || fr.Len() > 64 {
			return
		}
		off := []int64{HeaderSize}
		for len(sizes) > 0 && len(off) <= fr.Len() {
			n, w := binary.Uvarint(sizes)
			if w <= 0 || n > uint64(len(data)) {
				return
			}
			sizes = sizes[w:]
			off = append(off, off[len(off)-1]+int64(n))
		}
		for len(off) <= fr.Len() {
			off = append(off, off[len(off)-1])
		}
		if fixCRC && len(data) >= HeaderSize {
			data = bytes.Clone(data)
			binary.LittleEndian.PutUint32(data[12:], crcOf(data[:12]))
			for i := 1; i < len(off); i++ {
				a, b := off[i-1], off[i]
				if b-a > crcSize && b <= int64(len(data)) {
					binary.LittleEndian.PutUint32(data[b-crcSize:], crcOf(data[a:b-crcSize]))
				}
			}
		}
		s := memstore.New()
		put(t, s, "f", data)
		ref := backend.FileRef{Path: "f", Size: int64(len(data)), CRC32C: crcOf(data), KeyGroupOffsets: off, Compression: compression}
		want := fr
		if wantLen > 0 {
			want = backend.KeyGroupRange{Start: fr.Start + int(wantFrom), End: fr.Start + int(wantFrom) + int(wantLen) - 1}
		}
		var prev []byte
		err := Read(ctx, s, ref, fr, want, func(k, v []byte) error {
			kg := int(binary.BigEndian.Uint16(k))
			if !want.Contains(kg) || !fr.Contains(kg) {
				t.Fatalf("key %x of key group %d outside %s", k, kg, want)
			}
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				t.Fatalf("key %x after %x", k, prev)
			}
			prev = bytes.Clone(k)
			return nil
		})
		if err != nil && !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrIncompatible) {
			t.Fatalf("error is neither corrupt nor incompatible: %v", err)
		}
	})
}
