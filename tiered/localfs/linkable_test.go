package localfs_test

import (
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// TestLinkableLocalCopies: a Linkable store hands out its object files as
// their local copies, with the size and CRC32C of their bytes; a packed
// object has none (read it with Get), a missing one is not found, a bad
// name is refused, and dropping a copy deletes nothing.
func TestLinkableLocalCopies(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	ls := localfs.Linkable(s)
	lc, ok := tiered.AsLocalCopies(tiered.WithPrefix(ls, "job/"))
	if !ok {
		t.Fatal("a Linkable store (seen through a prefix) has no LocalCopies")
	}
	data := []byte("the bytes of an SST")
	if err := tiered.PutBytes(ctx, ls, "job/shared/a.sst", data); err != nil {
		t.Fatal(err)
	}
	cp, err := lc.LocalCopy(ctx, "shared/a.sst")
	if err != nil {
		t.Fatal(err)
	}
	want := tiered.LocalCopy{Path: filepath.Join(dir, "job", "shared", "a.sst"), Size: int64(len(data)),
		CRC32C: crc32.Checksum(data, frame.Table())}
	if cp != want {
		t.Fatalf("LocalCopy: %+v, want %+v", cp, want)
	}
	lc.DropLocalCopy("shared/a.sst")
	if b, err := os.ReadFile(want.Path); err != nil || string(b) != string(data) {
		t.Fatalf("after DropLocalCopy: %q, %v", b, err)
	}

	if err := s.Append(ctx, "job/packed", []byte("in a pack")); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.LocalCopy(ctx, "packed"); !errors.Is(err, tiered.ErrNoLocalCopy) {
		t.Errorf("a packed object: %v, want ErrNoLocalCopy", err)
	}
	if _, err := lc.LocalCopy(ctx, "shared/missing.sst"); !errors.Is(err, tiered.ErrNotFound) {
		t.Errorf("a missing object: %v, want ErrNotFound", err)
	}
	if _, err := ls.(tiered.LocalCopies).LocalCopy(ctx, "../outside"); err == nil {
		t.Error("a name outside the store was accepted")
	}
}
