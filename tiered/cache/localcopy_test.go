package cache_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"sync"
	"testing"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
)

// TestLocalCopy: a local copy is the object's bytes in the cache's own
// file, downloaded once for concurrent callers, reused, dropped on demand,
// refused for an object larger than the bound, and reachable through a
// prefixed view.
func TestLocalCopy(t *testing.T) {
	ctx := context.Background()
	remote := &counting{Store: memstore.New()}
	data := storetest.Data(9, 20_000)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tiered.PutBytes(ctx, remote, "job/x.sst", data))
	must(tiered.PutBytes(ctx, remote, "job/big", storetest.Data(1, 200_000)))
	dir := t.TempDir()
	c := newCache(t, remote, dir, 100_000)
	defer c.Close()
	view := tiered.WithPrefix(c, "job")
	lc, ok := tiered.AsLocalCopies(view)
	if !ok {
		t.Fatal("a view of a cache has no local copies")
	}
	const n = 8
	copies := make([]tiered.LocalCopy, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { copies[i], errs[i] = lc.LocalCopy(ctx, "x.sst") })
	}
	wg.Wait()
	for i := range n {
		must(errs[i])
		if copies[i].Path != copies[0].Path {
			t.Fatalf("copies at %s and %s", copies[i].Path, copies[0].Path)
		}
	}
	if got := remote.gets.Load(); got != 1 {
		t.Fatalf("%d concurrent local copies made %d remote reads, want 1", n, got)
	}
	got, err := os.ReadFile(copies[0].Path)
	must(err)
	if !bytes.Equal(got, data) || copies[0].Size != int64(len(data)) || copies[0].CRC32C != crc32.Checksum(data, frame.Table()) {
		t.Fatalf("local copy: %d bytes, size %d, crc %#x", len(got), copies[0].Size, copies[0].CRC32C)
	}
	if files := cachedFiles(t, dir); len(files) != 1 || files[0] != copies[0].Path {
		t.Fatalf("cache files %v, want only the copy handed out", files)
	}
	again, err := lc.LocalCopy(ctx, "x.sst")
	must(err)
	if !again.Hit || remote.gets.Load() != 1 {
		t.Fatalf("second local copy: hit %v, %d remote reads", again.Hit, remote.gets.Load())
	}
	lc.DropLocalCopy("x.sst")
	if _, err := os.Stat(copies[0].Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dropped copy still there: %v", err)
	}
	fresh, err := lc.LocalCopy(ctx, "x.sst")
	must(err)
	if fresh.Hit || remote.gets.Load() != 2 || c.Stats().Corrupt != 1 {
		t.Fatalf("after drop: hit %v, %d remote reads, stats %+v", fresh.Hit, remote.gets.Load(), c.Stats())
	}
	if _, err := lc.LocalCopy(ctx, "big"); !errors.Is(err, tiered.ErrNoLocalCopy) {
		t.Fatalf("object larger than the bound: %v", err)
	}
	if _, err := lc.LocalCopy(ctx, "missing"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("missing object: %v", err)
	}
	if _, ok := tiered.AsLocalCopies(memstore.New()); ok {
		t.Fatal("a memstore has local copies")
	}
}
