package memsnap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// FuzzRestore restores an instance from an arbitrary snapshot file (block
// sizes from sizes; header, block and file CRCs recomputed so the bytes
// reach the record decoder, kvstate's key checks and, once restored, every
// read operation). Nothing may panic; a failed restore must say the data is
// corrupt or incompatible, and a restored instance must answer reads with
// values or ErrCorrupt.
func FuzzRestore(f *testing.F) {
	w := newWorld()
	b, err := Open(w.config(full))
	if err != nil {
		f.Fatal(err)
	}
	for kg := 0; kg < 4; kg++ {
		for i := 0; i < 2; i++ {
			key := k(kg, fmt.Sprint("k", i))
			_ = errors.Join(b.Put("v", key, []byte("val")), b.Put("vt", key, []byte("t")), b.ListAppend("l", key, []byte("x"), []byte("y")),
				b.MapPut("m", key, []byte("u"), []byte("mv")), b.AggregateAdd("a", key, backend.Int64(3)),
				b.RegisterTimer("t", backend.Timer{KeyGroup: kg, Key: key.Key, Timestamp: 5}))
		}
	}
	p, err := b.Snapshot(context.Background(), 1)
	if err != nil {
		f.Fatal(err)
	}
	h, err := p.Run(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	seed, err := tiered.ReadAll(context.Background(), w.store, h.Files[0].Path, 0)
	if err != nil {
		f.Fatal(err)
	}
	var sizes []byte
	off := h.Files[0].KeyGroupOffsets
	for i := 1; i < len(off); i++ {
		sizes = binary.AppendUvarint(sizes, uint64(off[i]-off[i-1]))
	}
	f.Add(seed, sizes, uint8(0), uint8(15))
	f.Add(seed, sizes, uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, data, sizes []byte, from, to uint8) {
		if len(data) < 16 || len(data) > 1<<16 {
			return
		}
		data = append([]byte(nil), data...)
		off := []int64{16}
		for len(off) <= full.Len() {
			n, wd := binary.Uvarint(sizes)
			if wd <= 0 {
				n = 0
			} else {
				sizes = sizes[wd:]
			}
			if n > uint64(len(data)) {
				return
			}
			off = append(off, off[len(off)-1]+int64(n))
		}
		binary.LittleEndian.PutUint32(data[12:], frame.Checksum(data[:12]))
		for i := 1; i < len(off); i++ {
			if a, b := off[i-1], off[i]; b-a > 4 && b <= int64(len(data)) {
				binary.LittleEndian.PutUint32(data[b-4:], frame.Checksum(data[a:b-4]))
			}
		}
		w := newWorld()
		path := "job/chk-1/op-1/state-f"
		if err := tiered.PutBytes(context.Background(), w.store, path, data); err != nil {
			t.Fatal(err)
		}
		hh := *h
		hh.Files = []backend.FileRef{{Path: path, Size: int64(len(data)), CRC32C: frame.Checksum(data), KeyGroupOffsets: off}}
		a, b := int(from%16), int(to%16)
		r := backend.KeyGroupRange{Start: min(a, b), End: max(a, b)}
		rb, err := Open(w.config(r, &hh))
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrIncompatible) {
				t.Fatalf("restore failed with neither corrupt nor incompatible: %v", err)
			}
			return
		}
		defer rb.Close()
		ok := func(err error) {
			if err != nil && !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("read of restored data: %v", err)
			}
		}
		for kg := r.Start; kg <= r.End; kg++ {
			for i := 0; i < 2; i++ {
				key := k(kg, fmt.Sprint("k", i))
				_, _, err := rb.Get("v", key)
				ok(err)
				_, _, err = rb.Get("vt", key)
				ok(err)
				_, err = rb.ListGet("l", key)
				ok(err)
				_, _, err = rb.MapIterate("m", key, nil, 0)
				ok(err)
				_, _, err = rb.AggregateGet("a", key)
				ok(err)
				ok(rb.AggregateAdd("a", key, backend.Int64(1)))
			}
		}
		_, err = rb.PollTimers("t", 1<<62, 0)
		ok(err)
		p, err := rb.Snapshot(context.Background(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Run(context.Background()); err != nil {
			t.Fatalf("snapshot of restored data: %v", err)
		}
	})
}
