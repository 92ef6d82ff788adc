package zstdblock

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestRoundTripAndDamage(t *testing.T) {
	c := New(Options{Level: zstd.SpeedFastest, EncoderConcurrency: 1, MaxRawSize: 1 << 20})
	raw := bytes.Repeat([]byte("changelog "), 1000)
	blk, err := c.Append([]byte("hdr"), raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(blk, []byte("hdr")) || len(blk) >= len(raw) {
		t.Fatalf("Append wrote %d bytes for %d raw", len(blk), len(raw))
	}
	var buf []byte
	got, err := c.Decode(blk[3:], buf)
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("Decode: %v (equal %v)", err, bytes.Equal(got, raw))
	}
	// Reuse: a second decode into the returned storage allocates nothing new.
	again, err := c.Decode(blk[3:], got)
	if err != nil || &again[0] != &got[0] {
		t.Fatalf("Decode did not reuse the buffer: %v", err)
	}

	z := blk[3+binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(raw))):]
	for name, c2 := range map[string]struct {
		block []byte
		want  string
	}{
		"no length":       {nil, "unreadable"},
		"zero length":     {append(binary.AppendUvarint(nil, 0), z...), "impossible"},
		"above the bound": {append(binary.AppendUvarint(nil, 1<<20+1), z...), "impossible"},
		"above the ratio": {append(binary.AppendUvarint(nil, uint64(len(z))*MaxRatio+1), z...), "impossible"},
		"wrong length":    {append(binary.AppendUvarint(nil, uint64(len(raw)-1)), z...), "zstd"},
		"truncated frame": {blk[3 : len(blk)-2], "zstd"},
	} {
		if _, err := c.Decode(c2.block, nil); err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, c2.want)
		}
	}
}
