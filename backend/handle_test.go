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

func remoteSampleHandle() *Handle {
	h := sampleHandle()
	h.Version = HandleVersionRemote
	h.Backend = KindLSM
	h.Files = []FileRef{{Path: "job1/shared/lsm/00ab-5-000007.sst", Size: 4096, Shared: true, SizeOnly: true,
		Table: &TableRef{Level: 6, Smallest: []byte{0, 1, 'a'}, Largest: []byte{0, 3, 'z'}, SmallestSeq: 10, LargestSeq: 12}}}
	return h
}

func TestHandleRemoteFields(t *testing.T) {
	enc, err := EncodeHandle(remoteSampleHandle())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHandle(enc)
	if err != nil {
		t.Fatal(err)
	}
	if tb := got.Files[0].Table; tb == nil || tb.Level != 6 || string(tb.Largest) != "\x00\x03z" || tb.LargestSeq != 12 || !got.Files[0].SizeOnly {
		t.Fatalf("round trip lost the table reference: %+v", got.Files[0])
	}
	bad := map[string]func(h *Handle){
		"older version":     func(h *Handle) { h.Version = HandleVersionChannels },
		"size-only CRC":     func(h *Handle) { h.Files[0].CRC32C = 1 },
		"private table":     func(h *Handle) { h.Files[0].Shared = false },
		"level 7":           func(h *Handle) { h.Files[0].Table.Level = 7 },
		"reversed bounds":   func(h *Handle) { h.Files[0].Table.Smallest = []byte{1} },
		"no bounds":         func(h *Handle) { h.Files[0].Table.Largest = nil },
		"reversed seqnums":  func(h *Handle) { h.Files[0].Table.SmallestSeq = 13 },
		"size-only only v3": func(h *Handle) { h.Files[0].Table = nil; h.Version = HandleVersionChannels },
	}
	for name, edit := range bad {
		h := remoteSampleHandle()
		edit(h)
		if err := h.Validate(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
}
