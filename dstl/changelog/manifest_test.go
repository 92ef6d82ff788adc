package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/internal/frame"
)

// windowManifest is a manifest whose log window spans n checkpoints of a
// daemon's log, one range of a segment of its own each, as a window does
// between two materializations.
func windowManifest(n int) *manifest {
	lh := &dstl.Handle{WriterID: "w-3f9c2a", From: 1001}
	seq := uint64(1000)
	for i := range n {
		first := seq + 1
		seq += 37 + uint64(i%5)
		lh.Ranges = append(lh.Ranges, dstl.Range{
			Segment:     fmt.Sprintf("_changelog/shared/9e1d4c7a2b/%016x-%d", 5000+3*i, i%4),
			SegmentSize: int64(180_000 + 97*i), Offset: int64(4096 * (i % 7)), Length: int64(23_000 + 13*i),
			FirstSeq: first, LastSeq: seq,
		})
	}
	lh.To = seq
	base := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindLSM,
		Task: backend.TaskID{Job: "job", Operator: "op", Subtask: 3}, CheckpointID: 41,
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 31}, MaxParallelism: 128}
	return &manifest{Base: base, BaseSeq: 1000, Log: lh}
}

// TestManifestCompressed: a window of 200 checkpoints, whose JSON is far
// above backend.MaxInlineBytes, is framed compressed below it, so its
// handle carries it instead of an object of its own; it decodes to what
// was encoded.
func TestManifestCompressed(t *testing.T) {
	mf := windowManifest(200)
	raw, err := json.Marshal(mf)
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeManifest(mf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("200 ranges: JSON %d bytes, framed %d bytes (%.1fx)", len(raw), len(data), float64(len(raw))/float64(len(data)))
	if len(raw) <= backend.MaxInlineBytes || len(data) > backend.MaxInlineBytes {
		t.Errorf("JSON %d bytes, framed %d: want the JSON above %d and the frame within it", len(raw), len(data), backend.MaxInlineBytes)
	}
	got, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if mf.Version != manifestVersion || !reflect.DeepEqual(got, mf) {
		t.Errorf("decoded %+v, want %+v", got, mf)
	}
}

// TestManifestVersions: manifests of the versions before compression
// still decode; a newer version is ErrIncompatible; damage inside a
// compressed payload, under a valid frame, is ErrCorrupt.
func TestManifestVersions(t *testing.T) {
	for _, v := range []int{1, 2} {
		mf := windowManifest(3)
		mf.Version = v
		payload, err := json.Marshal(mf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeManifest(frame.Encode(manifestMagic, uint16(v), payload))
		if err != nil || !reflect.DeepEqual(got, mf) {
			t.Errorf("version %d: %+v, %v; want %+v", v, got, err, mf)
		}
	}
	if _, err := decodeManifest(frame.Encode(manifestMagic, manifestVersion+1, []byte("{}"))); !errors.Is(err, backend.ErrIncompatible) {
		t.Errorf("version %d: %v, want ErrIncompatible", manifestVersion+1, err)
	}
	data, err := encodeManifest(windowManifest(3))
	if err != nil {
		t.Fatal(err)
	}
	_, block, err := frame.Decode(manifestMagic, data)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), block...)
	bad[len(bad)/2] ^= 0x5a
	if _, err := decodeManifest(frame.Encode(manifestMagic, manifestVersion, bad)); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("a damaged compressed payload: %v, want ErrCorrupt", err)
	}
	// A version-2 payload (plain JSON) under a version-3 frame is not a
	// compressed block: corrupt, not misread.
	plain, _ := json.Marshal(windowManifest(3))
	if _, err := decodeManifest(frame.Encode(manifestMagic, manifestVersion, plain)); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("plain JSON under version %d: %v, want ErrCorrupt", manifestVersion, err)
	}
}
