package changelog

import (
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/internal/frame"
)

// The handle's checksum of a framed manifest is the CRC residue, the same
// for every frame; the manifest is bound to its handle by its log window.
func TestManifestBoundToHandle(t *testing.T) {
	a, b := frame.Encode(manifestMagic, 1, []byte(`{"version":1,"a":1}`)), frame.Encode(manifestMagic, 1, []byte(`{"version":1,"b":2}`))
	if frame.Checksum(a) != frame.Checksum(b) {
		t.Fatalf("the CRC32C of a whole frame is not constant (%08x, %08x): the check below is not needed", frame.Checksum(a), frame.Checksum(b))
	}
	win := func(segs ...string) *dstl.Handle {
		h := &dstl.Handle{From: 1, To: 9}
		for i, s := range segs {
			h.Ranges = append(h.Ranges, dstl.Range{Segment: s, SegmentSize: 100, Offset: 0, Length: int64(10 * (i + 1))})
		}
		return h
	}
	mine := win("_changelog/shared/r/1-0", "_changelog/shared/r/2-0")
	h := &backend.Handle{Log: &backend.HandleLog{Segments: sortedSegments(*mine), Bytes: mine.Bytes()}}
	if err := manifestMatchesHandle(h, &manifest{Log: mine}); err != nil {
		t.Fatalf("own manifest refused: %v", err)
	}
	for name, mf := range map[string]*manifest{
		"another window":     {Log: win("_changelog/shared/r/2-0", "_changelog/shared/r/3-0")},
		"a shorter window":   {Log: win("_changelog/shared/r/1-0")},
		"an empty window":    {},
		"same segments, len": {Log: win("_changelog/shared/r/1-0", "_changelog/shared/r/2-0", "_changelog/shared/r/2-0")},
	} {
		if err := manifestMatchesHandle(h, mf); err == nil || !strings.Contains(err.Error(), "log window") {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	empty := &backend.Handle{Log: &backend.HandleLog{}}
	if err := manifestMatchesHandle(empty, &manifest{}); err != nil {
		t.Fatalf("empty window refused: %v", err)
	}
	// A native savepoint's window is in the handle's own files.
	sp := &backend.Handle{Files: []backend.FileRef{{Path: "x", Size: 7}, {Path: "y", Size: 5}}, Log: &backend.HandleLog{Bytes: 5}}
	if err := manifestMatchesHandle(sp, &manifest{LogFiles: []int{1}}); err != nil {
		t.Fatalf("savepoint window refused: %v", err)
	}
	if err := manifestMatchesHandle(sp, &manifest{LogFiles: []int{0}}); err == nil {
		t.Fatal("savepoint window of another size accepted")
	}
}
