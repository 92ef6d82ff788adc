package localfs_test

import (
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

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

// TestLinkablePutFile: a Linkable store stores a local file by linking it
// (the object is the file's inode), with the size and CRC32C of its
// bytes; PutIfAbsent refuses an existing name, Put replaces it; a store on
// another vfs.FS, or a missing file, stores nothing.
func TestLinkablePutFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	fp, ok := tiered.AsFilePuts(tiered.WithPrefix(localfs.Linkable(s), "job/"))
	if !ok {
		t.Fatal("a Linkable store (seen through a prefix) has no FilePuts")
	}
	src := filepath.Join(t.TempDir(), "000007.sst")
	data := []byte("the bytes of a table")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	size, crc, err := fp.PutFile(ctx, "shared/a.sst", src, true)
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || crc != crc32.Checksum(data, frame.Table()) {
		t.Fatalf("PutFile: size %d crc %08x, want %d %08x", size, crc, len(data), crc32.Checksum(data, frame.Table()))
	}
	obj := filepath.Join(dir, "job", "shared", "a.sst")
	fiObj, err := os.Stat(obj)
	if err != nil {
		t.Fatal(err)
	}
	fiSrc, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fiObj, fiSrc) {
		t.Fatal("the object is a copy, not a link of the file")
	}
	if got, err := tiered.ReadAll(ctx, s, "job/shared/a.sst", 1<<20); err != nil || string(got) != string(data) {
		t.Fatalf("Get: %q, %v", got, err)
	}
	if _, _, err := fp.PutFile(ctx, "shared/a.sst", src, true); !errors.Is(err, tiered.ErrExists) {
		t.Fatalf("PutIfAbsent of an existing name: %v, want ErrExists", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("newer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fp.PutFile(ctx, "shared/a.sst", other, false); err != nil {
		t.Fatalf("Put over an existing name: %v", err)
	}
	if got, err := tiered.ReadAll(ctx, s, "job/shared/a.sst", 1<<20); err != nil || string(got) != "newer" {
		t.Fatalf("after Put: %q, %v", got, err)
	}
	if b, err := os.ReadFile(src); err != nil || string(b) != string(data) {
		t.Fatalf("the first file after its name was replaced: %q, %v", b, err)
	}
	if _, _, err := fp.PutFile(ctx, "shared/missing.sst", filepath.Join(t.TempDir(), "none"), true); err == nil ||
		!strings.Contains(err.Error(), "shared/missing.sst") {
		t.Fatalf("a missing file: %v, want an error naming the object", err)
	}
	if _, err := s.Stat(ctx, "job/shared/missing.sst"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("a failed PutFile stored something: %v", err)
	}
	if _, _, err := fp.PutFile(ctx, "../outside", src, true); err == nil {
		t.Error("a name outside the store was accepted")
	}

	mem, err := localfs.OpenWith("/store", localfs.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, _, err := localfs.Linkable(mem).(tiered.FilePuts).PutFile(ctx, "a.sst", src, true); !errors.Is(err, tiered.ErrNotLinked) {
		t.Fatalf("a store on another vfs.FS: %v, want ErrNotLinked", err)
	}
}
