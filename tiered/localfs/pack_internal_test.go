package localfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
)

// pinnedPack is a pack file of format version 1, committed under
// testdata/pinned (the pack format is frozen): two live objects and one
// deleted. STATED_UPDATE_PINNED=1 writes it again, only for a new version
// (keep the old file and its test then).
const pinnedPack = "testdata/pinned/" + packDir + "/0000000000000001-pinned" + packSuffix

var pinnedMod = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func pinnedPackBytes() []byte {
	b := packHeader()
	b = append(b, encodeFrame("_changelog/shared/run/0000000000000001-0", []byte("first segment"), pinnedMod)...)
	dead := encodeFrame("_changelog/shared/run/0000000000000002-0", []byte("deleted segment"), pinnedMod)
	dead[4] = stateDeleted
	b = append(b, dead...)
	b = append(b, encodeFrame("job/x", bytes.Repeat([]byte{0, 0xff}, 100), pinnedMod)...)
	return append(b, make([]byte, 64)...) // the zeros after the last frame
}

// The pinned pack file still reads: its objects, sizes and times, and
// the deleted one stays deleted. The bytes this build writes are the
// pinned ones.
func TestPinnedPack(t *testing.T) {
	if os.Getenv("STATED_UPDATE_PINNED") == "1" {
		if err := os.MkdirAll(filepath.Dir(pinnedPack), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pinnedPack, pinnedPackBytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pinned, err := os.ReadFile(pinnedPack)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pinned, pinnedPackBytes()) {
		t.Fatal("this build's pack bytes differ from the pinned version 1 file")
	}
	s, err := OpenWith("testdata/pinned", Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	want := map[string][]byte{
		"_changelog/shared/run/0000000000000001-0": []byte("first segment"),
		"job/x": bytes.Repeat([]byte{0, 0xff}, 100),
	}
	var listed int
	err = tiered.Walk(ctx, s, "", func(o tiered.ObjectInfo) error {
		listed++
		if w, ok := want[o.Name]; !ok || o.Size != int64(len(w)) || !o.ModTime.Equal(pinnedMod) {
			t.Errorf("listed %s (%d bytes, %v)", o.Name, o.Size, o.ModTime)
		}
		return nil
	})
	if err != nil || listed != len(want) {
		t.Fatalf("listed %d objects, want %d: %v", listed, len(want), err)
	}
	for name, w := range want {
		got, err := tiered.ReadAll(ctx, s, name, 1<<20)
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("%s reads %q, %v", name, got, err)
		}
	}
	if _, err := s.Stat(ctx, "_changelog/shared/run/0000000000000002-0"); !tiered.IsNotFound(err) {
		t.Errorf("the deleted object: %v", err)
	}
}

// scanPack never panics or reads past its input on any bytes, and every
// frame it returns is whole, valid and within the file, in order.
func FuzzScanPack(f *testing.F) {
	f.Add(pinnedPackBytes())
	f.Add(packHeader())
	f.Add([]byte{})
	torn := pinnedPackBytes()
	f.Add(torn[:len(torn)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, end, err := scanPack(bytes.NewReader(b), int64(len(b)), 0)
		if err != nil {
			return
		}
		prev := int64(packHeaderLen)
		for _, fi := range frames {
			if fi.off < prev || fi.off+fi.length > int64(len(b)) || fi.off+fi.length > end {
				t.Fatalf("frame at %d (%d bytes) outside [%d, %d]", fi.off, fi.length, prev, end)
			}
			if _, err := decodeFrame(b[fi.off:fi.off+fi.length], fi.off); err != nil {
				t.Fatalf("returned frame does not decode: %v", err)
			}
			if fi.size() < 0 {
				t.Fatalf("frame at %d has size %d", fi.off, fi.size())
			}
			prev = fi.off + fi.length
		}
	})
}
