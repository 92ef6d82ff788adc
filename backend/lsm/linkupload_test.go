package lsm

import (
	"context"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// TestCheckpointLinksIntoALocalStore: a checkpoint into a store whose
// objects are files on the same file system (the daemon's --external-dir,
// localfs.Linkable) links the checkpoint's files rather than copying
// them: each uploaded table is the live table's inode, its CRC32C in the
// handle is its bytes', and a restore from the handle reads every entry
// back. Without the link path the objects would be copies (other inodes).
func TestCheckpointLinksIntoALocalStore(t *testing.T) {
	e := newEnv(t)
	storeDir := t.TempDir()
	ls, err := localfs.Open(storeDir)
	must(t, err)
	t.Cleanup(func() { _ = ls.Close() })
	e.store = tiered.WithPrefix(localfs.Linkable(ls), "ext/")
	b := e.open(full(), nil)
	fill(t, b, full(), 3000, "a")
	h := checkpoint(t, b, 1)
	b.NotifyCheckpointComplete(1)

	linked := 0
	for _, f := range h.Files {
		obj := filepath.Join(storeDir, "ext", filepath.FromSlash(f.Path))
		data, err := os.ReadFile(obj)
		must(t, err)
		if int64(len(data)) != f.Size || crc32.Checksum(data, frame.Table()) != f.CRC32C {
			t.Fatalf("%s: %d bytes crc %08x, handle says %d %08x", f.Path, len(data),
				crc32.Checksum(data, frame.Table()), f.Size, f.CRC32C)
		}
		if !f.Shared {
			continue
		}
		live, err := os.Stat(filepath.Join(b.dbDir, f.LocalName))
		if err != nil {
			continue // compacted away since
		}
		fi, err := os.Stat(obj)
		must(t, err)
		if !os.SameFile(fi, live) {
			t.Fatalf("%s is a copy of %s, not a link", f.Path, f.LocalName)
		}
		linked++
	}
	if linked == 0 {
		t.Fatalf("no uploaded table is linked to a live one:\n%s", fileNames(h))
	}
	want := dump(t, b)
	r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h} })
	sameDump(t, dump(t, r), want)
	if err := ls.Delete(context.Background(), "ext/"+h.Files[0].Path); err != nil {
		t.Fatal(err)
	}
}
