package chanstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
)

var update = flag.Bool("update", false, "regenerate testdata/segment-v1.bin (only for a new format version: keep the old file and a test reading it)")

// equalBuffers compares buffers, treating nil and empty Data as equal.
func equalBuffers(a, b [][]Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j].KeyGroup != b[i][j].KeyGroup || !bytes.Equal(a[i][j].Data, b[i][j].Data) {
				return false
			}
		}
	}
	return true
}

// pinnedBuffers exercise every field: several buffers, an empty buffer,
// an empty record, a multi-byte varint key group and length.
func pinnedBuffers() [][]Record {
	return [][]Record{
		{{KeyGroup: 0, Data: []byte("a")}, {KeyGroup: 300, Data: bytes.Repeat([]byte{0xAB}, 130)}},
		{},
		{{KeyGroup: 5, Data: nil}},
	}
}

func TestSegmentPinned(t *testing.T) {
	path := filepath.Join("testdata", "segment-v1.bin")
	enc := EncodeSegment(pinnedBuffers())
	if *update {
		if err := os.WriteFile(path, enc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, want) {
		t.Fatalf("EncodeSegment changed the pinned format:\n got %x\nwant %x", enc, want)
	}
	got, err := DecodeSegment(want, backend.ChannelKeyed, 512)
	if err != nil {
		t.Fatal(err)
	}
	if !equalBuffers(got, pinnedBuffers()) {
		t.Fatalf("decoded %v, want %v", got, pinnedBuffers())
	}
}

// seg frames a hand-written payload.
func seg(payload ...uint64) []byte {
	var p []byte
	for _, v := range payload {
		p = binary.AppendUvarint(p, v)
	}
	return frame.Encode(SegmentMagic, SegmentVersion, p)
}

func TestDecodeSegmentRefuses(t *testing.T) {
	good := EncodeSegment([][]Record{{{KeyGroup: 1, Data: []byte("xy")}}})
	for _, tc := range []struct {
		name string
		data []byte
		kind backend.ChannelKind
		want string
	}{
		{"empty", nil, backend.ChannelKeyed, "shorter than"},
		{"bad magic", append([]byte("XXXX"), good[4:]...), backend.ChannelKeyed, "magic"},
		{"version 2", frame.Encode(SegmentMagic, 2, []byte{0}), backend.ChannelKeyed, "version 2"},
		{"truncated", good[:len(good)-1], backend.ChannelKeyed, "length field"},
		{"no payload", frame.Encode(SegmentMagic, SegmentVersion, nil), backend.ChannelKeyed, "buffer count"},
		{"huge buffer count", seg(1 << 62), backend.ChannelKeyed, "exceeds"},
		{"huge record count", seg(1, 1<<40, 0, 0), backend.ChannelKeyed, "exceeds"},
		{"huge length", seg(1, 1, 0, 1<<50), backend.ChannelKeyed, "exceeds"},
		{"length past end", seg(1, 1, 0, 5, 1, 2), backend.ChannelKeyed, "exceeds"},
		{"key group too big", seg(1, 1, 8, 0), backend.ChannelKeyed, "outside [0,8)"},
		{"negative key group", EncodeSegment([][]Record{{{KeyGroup: -1}}}), backend.ChannelKeyed, "outside"},
		{"key group on forward", seg(1, 1, 3, 0), backend.ChannelForward, "forward channel"},
		{"key group on broadcast", seg(1, 1, 1, 0), backend.ChannelBroadcast, "broadcast channel"},
		{"trailing", seg(1, 0, 7), backend.ChannelKeyed, "trailing"},
		{"bad varint", frame.Encode(SegmentMagic, SegmentVersion, bytes.Repeat([]byte{0xff}, 11)), backend.ChannelKeyed, "varint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSegment(tc.data, tc.kind, 8)
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrCorrupt saying %q", err, tc.want)
			}
		})
	}
	if _, err := DecodeSegment(good, "keyd", 8); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func genBuffers(t *rapid.T, kind backend.ChannelKind, maxParallelism int) [][]Record {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) []Record {
		return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Record {
			r := Record{Data: rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "data")}
			if kind == backend.ChannelKeyed {
				r.KeyGroup = int32(rapid.IntRange(0, maxParallelism-1).Draw(t, "kg"))
			}
			return r
		}), 0, 6).Draw(t, "buffer")
	}), 0, 5).Draw(t, "buffers")
}

var kinds = []backend.ChannelKind{backend.ChannelKeyed, backend.ChannelForward, backend.ChannelBroadcast}

func TestSegmentRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(kinds).Draw(t, "kind")
		maxP := rapid.IntRange(1, backend.MaxMaxParallelism).Draw(t, "maxParallelism")
		in := genBuffers(t, kind, maxP)
		out, err := DecodeSegment(EncodeSegment(in), kind, maxP)
		if err != nil {
			t.Fatal(err)
		}
		if !equalBuffers(in, out) {
			t.Fatalf("decode(encode(x)) = %v, want %v", out, in)
		}
	})
}

// FuzzDecodeSegment: decoding never panics, errors wrap ErrCorrupt, and
// whatever decodes re-encodes to bytes that decode to the same buffers
// (not always the same bytes: the decoder accepts non-minimal varints).
func FuzzDecodeSegment(f *testing.F) {
	f.Add(EncodeSegment(pinnedBuffers()), uint16(512), uint8(0))
	f.Add(EncodeSegment(nil), uint16(1), uint8(1))
	f.Add(seg(1, 1, 0, 0), uint16(8), uint8(2))
	f.Add(seg(1<<62), uint16(8), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, maxP uint16, k uint8) {
		kind := kinds[int(k)%len(kinds)]
		out, err := DecodeSegment(data, kind, int(maxP))
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := DecodeSegment(EncodeSegment(out), kind, int(maxP))
		if err != nil || !equalBuffers(out, again) {
			t.Fatalf("re-encoding %v: %v, %v", out, again, err)
		}
	})
}
