package backend

import (
	"errors"
	"testing"
	"time"
)

func sampleHandle() *Handle {
	return &Handle{
		Version: HandleFormatVersion, Backend: KindFile,
		Task:         TaskID{Job: "job1", Operator: "op", Subtask: 2},
		CheckpointID: 7, KeyGroups: KeyGroupRange{Start: 0, End: 3}, MaxParallelism: 128,
		States: []StateDescriptor{{Name: "v", Kind: KindValue, TTL: time.Minute}},
		Files: []FileRef{{Path: "job1/chk-7/op-2/state", Size: 10, CRC32C: 5,
			KeyGroupOffsets: []int64{0, 1, 2, 3, 10}}},
	}
}

func TestHandleRoundTrip(t *testing.T) {
	h := sampleHandle()
	enc, err := EncodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHandle(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Files[0].Path != h.Files[0].Path || got.States[0].TTL != time.Minute || got.KeyGroups != h.KeyGroups {
		t.Fatalf("round trip changed the handle: %+v", got)
	}
}

func TestHandleRejectsEscapingPaths(t *testing.T) {
	for _, p := range []string{"../x", "/abs", "a/../../b", "a/./b", "", "a/..", `a\b`} {
		h := sampleHandle()
		h.Files[0].Path = p
		if _, err := EncodeHandle(h); !errors.Is(err, ErrCorrupt) {
			t.Errorf("path %q accepted: %v", p, err)
		}
	}
}

func TestHandleRejectsBadOffsets(t *testing.T) {
	h := sampleHandle()
	h.Files[0].KeyGroupOffsets = []int64{0, 5, 3, 6, 10}
	if _, err := EncodeHandle(h); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("descending offsets accepted: %v", err)
	}
	h.Files[0].KeyGroupOffsets = []int64{0, 1}
	if _, err := EncodeHandle(h); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short offsets accepted: %v", err)
	}
}

func TestDecodeHandleDamage(t *testing.T) {
	enc, _ := EncodeHandle(sampleHandle())
	enc[len(enc)/2] ^= 0x40
	if _, err := DecodeHandle(enc); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
}

func FuzzDecodeHandle(f *testing.F) {
	enc, _ := EncodeHandle(sampleHandle())
	f.Add(enc)
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHandle(data)
		if err != nil {
			return
		}
		if _, err := EncodeHandle(h); err != nil {
			t.Fatalf("decoded handle does not re-encode: %v", err)
		}
	})
}
